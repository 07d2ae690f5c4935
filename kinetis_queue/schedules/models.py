"""The claim table: one row per (schedule, tick) pushed, or being pushed."""

from __future__ import annotations

from django.db import models

from kinetis_queue.validation import JOB_ID_LENGTH


class ScheduleTick(models.Model):
    """One claimed tick of one schedule (claim stores: SqlClaims and DatabaseClaims, stores.py).

    The unique (schedule, tick) pair is the claim: the first insert wins, any other scheduler's
    insert of the same pair fails. On an SQL connection the row is written in the transaction that
    pushes the job, so ``pushed_at`` is set at once; on SQS and RabbitMQ it is set after the push,
    and a row left without it past the claim timeout is completed by another scheduler.
    """

    schedule = models.CharField(max_length=100)
    #: The tick, in Unix seconds (UTC).
    tick = models.BigIntegerField()
    #: The connection the job was pushed to.
    connection = models.CharField(max_length=64)
    #: The pushed job's id: derived from (schedule, tick), so a repeated push has the same id.
    job_id = models.CharField(max_length=JOB_ID_LENGTH)
    #: Unix seconds when the claim was taken (or last taken over).
    claimed_at = models.FloatField()
    #: Unix seconds when the push was known done; NULL while a claim's push is outstanding.
    pushed_at = models.FloatField(null=True)
    #: A random token of the scheduler holding the claim: only the holder marks it pushed.
    owner = models.CharField(max_length=32)

    class Meta:
        app_label = "kinetis_queue"
        db_table = "kinetis_queue_schedule_ticks"
        verbose_name = "schedule"
        verbose_name_plural = "schedules"
        constraints = [models.UniqueConstraint(fields=["schedule", "tick"], name="kinetis_queue_schedule_tick_once")]

    def __str__(self) -> str:
        return f"{self.schedule} at {self.tick}"
