"""Rate limits per time window (kinetis_queue.ratelimits): the table of counted starts in a Django database."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("kinetis_queue", "0013_job_priority"),
    ]

    operations = [
        migrations.CreateModel(
            name="RateSlot",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("rate_key", models.CharField(max_length=32)),
                ("slot", models.IntegerField()),
                ("at", models.FloatField(default=0)),
            ],
            options={
                "verbose_name": "rate limit slot",
                "db_table": "kinetis_queue_rate_slots",
                "constraints": [
                    models.UniqueConstraint(fields=("rate_key", "slot"), name="kinetis_queue_rate_slot_once")
                ],
            },
        ),
    ]
