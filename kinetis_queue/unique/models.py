"""The lock table of unique jobs: one row per key held (or last held) on a connection."""

from __future__ import annotations

from django.db import models

from kinetis_queue.validation import JOB_ID_LENGTH


class UniqueLockRecord(models.Model):
    """One unique key and the job holding it (kinetis_queue.unique).

    The SQL backend writes it in the transaction that inserts the job, in the connection's own database,
    and derives whether it still holds from the job's row (``job_row``): gone, the key is free. For SQS,
    RabbitMQ and the other backends it lives in the Django database (kinetis_queue.unique.database):
    written before the push (``confirmed`` False), confirmed after it, and deleted by the worker when
    the job starts or settles, as its scope says. Either way ``expires_at`` bounds it.
    """

    #: The lock key: 32 hex digits of the connection and the key (never the key as written).
    lock_key = models.CharField(max_length=32, unique=True)
    job_id = models.CharField(max_length=JOB_ID_LENGTH)
    #: The SQL backend's ``kinetis_queue_jobs.id`` of the holder; NULL in the Django-database store.
    job_row = models.BigIntegerField(null=True)
    #: The holder's scope: "started", "settled" or "expired".
    until = models.CharField(max_length=8)
    #: Raised by one when a debounced push supersedes the holder's message (Django-database store).
    generation = models.IntegerField(default=0)
    #: Unix seconds after which the key is free whatever the holder does.
    expires_at = models.FloatField()
    #: Unix seconds when the holder's push took the key.
    claimed_at = models.FloatField()
    #: False while the push that took the key is in flight (Django-database store).
    confirmed = models.BooleanField(default=True)
    #: A random token of the push that took the key: only it confirms or gives the key back.
    owner = models.CharField(max_length=32, default="")

    class Meta:
        app_label = "kinetis_queue"
        db_table = "kinetis_queue_unique_locks"
        verbose_name = "unique job lock"

    def __str__(self) -> str:
        return f"{self.lock_key} held by {self.job_id}"
