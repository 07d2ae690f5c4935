"""The tables of cancellation and pausing (kinetis_queue.control): rows the workers of a connection read."""

from __future__ import annotations

from django.db import models

from kinetis_queue.db.fields import ExactCharField
from kinetis_queue.validation import JOB_ID_LENGTH, MAX_QUEUE_NAME


class Cancellation(models.Model):
    """A job ``cancel()`` could not remove from its store: the worker that meets it skips it, and a running
    one sees ``JobContext.cancelled`` become true.

    Workers load the rows of their connection added since their last look, by primary key (one indexed
    range read a second); ``queue_prune`` deletes the rows older than its ``--hours``.
    """

    connection = models.CharField(max_length=64)
    job_id = models.CharField(max_length=JOB_ID_LENGTH)
    cancelled_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        app_label = "kinetis_queue"
        db_table = "kinetis_queue_cancellations"
        verbose_name = "cancellation"
        constraints = [models.UniqueConstraint(fields=["connection", "job_id"], name="kinetis_queue_cancellation_once")]

    def __str__(self) -> str:
        return f"job {self.job_id} of {self.connection} cancelled"


class PausedQueue(models.Model):
    """A paused queue of a connection: its workers take none of its jobs while the row exists (pushes still
    succeed). ``queue_pause`` writes it, ``queue_resume`` deletes it."""

    connection = models.CharField(max_length=64)
    #: Compared byte for byte, as every queue name is (DESIGN.md §7).
    queue = ExactCharField(max_length=MAX_QUEUE_NAME)
    paused_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "kinetis_queue"
        db_table = "kinetis_queue_paused_queues"
        verbose_name = "paused queue"
        constraints = [models.UniqueConstraint(fields=["connection", "queue"], name="kinetis_queue_paused_once")]

    def __str__(self) -> str:
        return f"{self.queue} of {self.connection} paused"
