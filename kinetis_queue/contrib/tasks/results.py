"""The result store behind the django.tasks backend: one row per enqueued django.tasks task.

A model of the kinetis_queue app (``kinetis_queue.models`` imports it; migration 0002). Kept apart
from ``backend.py`` so the model never imports ``django.tasks`` (absent on Django 5.2).
Every write made by a run is fenced by that run's job id and delivery attempt: a run whose lease was
reclaimed (a lower attempt than the row's) can neither overwrite nor append to the result of the run
that replaced it (issue 8, "Writes are fenced by the delivery"); a retry (a new job id) takes over.
"""

from __future__ import annotations

from django.db import models

from kinetis_queue.validation import JOB_ID_LENGTH, MAX_QUEUE_NAME


class TaskResultRecord(models.Model):
    """What ``get_result()`` reads: status, timestamps, worker ids, errors and the return value."""

    id = models.CharField(primary_key=True, max_length=64)
    task_path = models.CharField(max_length=255)
    backend = models.CharField(max_length=64)
    queue_name = models.CharField(max_length=MAX_QUEUE_NAME)
    priority = models.IntegerField(default=0)
    run_after = models.DateTimeField(null=True)
    #: One of django.tasks' TaskResultStatus values: READY, RUNNING, FAILED, SUCCESSFUL.
    status = models.CharField(max_length=10, db_index=True)
    enqueued_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True, db_index=True)
    last_attempted_at = models.DateTimeField(null=True)
    args = models.JSONField(default=list)
    kwargs = models.JSONField(default=dict)
    #: One {"exception_class_path", "traceback"} per failed attempt, oldest first.
    errors = models.JSONField(default=list)
    worker_ids = models.JSONField(default=list)
    return_value = models.JSONField(null=True)
    #: The delivery attempt that last started a run: the fence for every later write.
    attempt = models.IntegerField(default=0)
    #: The queue job id of that run (None before any run): a retry of a job that failed for good is
    #: a new job, whose attempts count from 1 again, and it takes the row over (tasks._owns).
    job_id = models.CharField(max_length=JOB_ID_LENGTH, null=True)  # noqa: DJ001  # None: no run started yet

    class Meta:
        db_table = "kinetis_queue_task_results"
        verbose_name = "task result"

    def __str__(self) -> str:
        return f"{self.task_path} {self.id} ({self.status})"


def prune(older_than_hours: float) -> int:
    """Delete finished results (SUCCESSFUL or FAILED) that finished strictly before the cut-off; return how many.

    READY and RUNNING results are never pruned: their task may still run.
    """
    from datetime import timedelta

    from django.utils import timezone

    cutoff = timezone.now() - timedelta(hours=older_than_hours)
    deleted, _ = TaskResultRecord.objects.filter(finished_at__lt=cutoff).delete()
    return deleted
