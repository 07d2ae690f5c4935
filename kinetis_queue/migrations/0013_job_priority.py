"""Job priority on the SQL backend: a ``priority`` column and the claim's index (queue, priority DESC, id).

The new index is built before the old (queue, id) one is dropped, so a claim always has one to use.
A worker that predates the column still inserts rows (the column's database default is 0) and still
claims them, in id order, with a sort: upgrade the workers with this migration (docs/backends/sql.md).
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("kinetis_queue", "0012_control"),
    ]

    operations = [
        migrations.AddField(
            model_name="queuedjobrecord",
            name="priority",
            field=models.SmallIntegerField(db_default=0),
        ),
        migrations.AddIndex(
            model_name="queuedjobrecord",
            index=models.Index(fields=["queue", "-priority", "id"], name="kinetis_queue_jobs_claim"),
        ),
        migrations.RemoveIndex(
            model_name="queuedjobrecord",
            name="kinetis_queue_jobs_queue",
        ),
    ]
