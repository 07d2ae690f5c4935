"""The observability tables: the worker registry (a row per worker process, rewritten every few seconds by the
worker itself) and the per-minute history."""

from __future__ import annotations

from typing import Any

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper

from kinetis_queue.db.fields import ExactCharField
from kinetis_queue.validation import MAX_QUEUE_NAME


class WorkerRecord(models.Model):
    """A worker process as it last described itself (kinetis_queue/observability/registry.py)."""

    #: A random id per process (a --processes child has its own).
    id = models.CharField(primary_key=True, max_length=32)
    host = models.CharField(max_length=255)
    pid = models.IntegerField()
    connection = models.CharField(max_length=64)
    #: The watched queues, comma-separated, highest priority first.
    queues = models.TextField()
    concurrency = models.IntegerField()
    #: Unix seconds.
    started_at = models.FloatField()
    last_seen = models.FloatField()
    #: When it last started a job; NULL before its first.
    last_started = models.FloatField(null=True)
    #: The jobs it runs now, as JSON: [{"id", "job", "queue", "started"}] (names, never arguments).
    running = models.TextField(default="[]")
    processed = models.BigIntegerField(default=0)
    failed = models.BigIntegerField(default=0)

    class Meta:
        app_label = "kinetis_queue"
        db_table = "kinetis_queue_workers"
        verbose_name = "worker"
        indexes = [models.Index(fields=["connection", "last_seen"], name="kinetis_queue_worker_seen")]

    def __str__(self) -> str:
        return f"{self.host}:{self.pid} on {self.connection}"


class JobNameField(models.CharField):  # type: ignore[type-arg]
    """A job's class path or task name, compared byte for byte (``utf8mb4_bin`` on MySQL/MariaDB, whose
    default is case-insensitive: two classes differing in case are two rows)."""

    def db_parameters(self, connection: BaseDatabaseWrapper) -> dict[str, Any]:
        params = super().db_parameters(connection)
        if connection.vendor == "mysql":
            params["collation"] = "utf8mb4_bin"
        return params


class HistoryMinute(models.Model):
    """One process's counts of one minute, connection, queue and job class (kinetis_queue/observability/history.py)."""

    #: Unix time // 60.
    minute = models.IntegerField()
    #: The writing process's random id: each process writes its own rows only.
    source = ExactCharField(max_length=32)
    connection = ExactCharField(max_length=64)
    queue = ExactCharField(max_length=MAX_QUEUE_NAME)
    job = JobNameField(max_length=200)
    pushed = models.BigIntegerField(default=0)
    succeeded = models.BigIntegerField(default=0)
    released = models.BigIntegerField(default=0)
    #: Deliveries that failed for good.
    failed = models.BigIntegerField(default=0)
    #: Lost, snoozed, skipped, deferred and expired deliveries.
    other = models.BigIntegerField(default=0)
    #: Of ``other``, the deliveries of jobs that expired unstarted (kinetis_queue.expiry).
    expired = models.BigIntegerField(default=0)
    #: The deliveries' seconds, summed.
    runtime = models.FloatField(default=0.0)
    #: The deliveries per run-time bucket (history.BUCKETS, then the longer ones), comma-separated.
    buckets = models.TextField(default="")

    class Meta:
        app_label = "kinetis_queue"
        db_table = "kinetis_queue_history"
        verbose_name = "history minute"
        constraints = [
            models.UniqueConstraint(
                fields=["minute", "source", "connection", "queue", "job"], name="kinetis_queue_history_key"
            )
        ]
        indexes = [models.Index(fields=["connection", "minute"], name="kinetis_queue_history_minute")]

    def __str__(self) -> str:
        return f"{self.connection}/{self.queue} {self.job} at minute {self.minute}"
