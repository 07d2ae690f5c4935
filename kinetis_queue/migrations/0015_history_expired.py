"""Job expiry (kinetis_queue.expiry): the history counts the jobs that expired unstarted in a column of their own
(they are also in ``other``, as before)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("kinetis_queue", "0014_rate_slots"),
    ]

    operations = [
        migrations.AddField(
            model_name="historyminute",
            name="expired",
            field=models.BigIntegerField(default=0),
        ),
    ]
