"""The two tables: waiting and reserved jobs (SQL backend), and failed jobs (every backend)."""

from __future__ import annotations

from django.db import models

from kinetis_queue.db.fields import ExactCharField as ExactCharField  # its home; the migrations name it here
from kinetis_queue.job import display_name
from kinetis_queue.payload.envelope import decode_args, loads
from kinetis_queue.validation import JOB_ID_LENGTH, MAX_QUEUE_NAME


class QueuedJobRecord(models.Model):
    """One job on the SQL backend. Times are epoch seconds from the writing process's clock."""

    job_id = models.CharField(max_length=JOB_ID_LENGTH)
    queue = ExactCharField(max_length=MAX_QUEUE_NAME)
    job_class = models.CharField(max_length=255)
    args = models.TextField()
    metadata = models.TextField(default="{}")
    #: Completed attempts; pop() reports one more.
    attempts = models.IntegerField(default=0)
    max_attempts = models.IntegerField(null=True)
    pushed_at = models.FloatField()
    available_at = models.FloatField()
    reserved_at = models.FloatField(null=True)
    reserved_token = ExactCharField(max_length=32, null=True)
    #: Order within the queue, higher first (kinetis_queue.priority); also in ``metadata`` when not 0.
    #: The database default lets a writer that predates the column still insert rows.
    priority = models.SmallIntegerField(db_default=0)

    class Meta:
        db_table = "kinetis_queue_jobs"
        # The claim's index (backends/sql/claim.py): each queue's rows by priority, highest first, then id.
        indexes = [models.Index(fields=["queue", "-priority", "id"], name="kinetis_queue_jobs_claim")]
        verbose_name = "queued job"

    def __str__(self) -> str:
        return f"{self.job_class} on {self.queue} ({self.job_id})"


class FailedJob(models.Model):
    """A job the worker gave up on, recorded before fail() (contract: "Recording a job before fail()")."""

    #: The name of the connection that ran the job (the default connection's too). NULL only in
    #: records written by versions that left the default connection unnamed: it means the default.
    connection = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    queue = models.CharField(max_length=MAX_QUEUE_NAME)
    job_id = models.CharField(max_length=JOB_ID_LENGTH)
    job_class = models.CharField(max_length=255)
    #: The arguments exactly as stored (JSON text); shown redacted per Sensitive.
    args = models.TextField()
    metadata = models.TextField(default="{}")
    max_attempts = models.IntegerField(null=True)
    attempts = models.IntegerField()
    exception_class = models.CharField(max_length=255)
    exception_message = models.TextField(blank=True)
    #: The formatted traceback: frames and the exception's own messages, never local variables.
    traceback = models.TextField(blank=True, default="")
    failed_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        db_table = "kinetis_queue_failed_jobs"
        ordering = ["-failed_at", "-id"]
        verbose_name = "failed job"

    def __str__(self) -> str:
        # The admin's titles, breadcrumbs and history name the task or receiver, not its carrier class.
        return f"{self.shown_class()} on {self.queue} ({self.job_id})"

    def shown_class(self) -> str:
        """What the operator sees as the record's job: the task or receiver it carried, else its class path."""
        try:
            args = decode_args(loads(self.args))
        except Exception:
            return self.job_class
        return display_name(self.job_class, args)


class RestartMarker(models.Model):
    """A connection's restart generation: ``queue_restart`` moves it, and every worker of that
    connection that sees it move exits after its current job (SqueHub's restart marker).

    It lives in the database so that workers on every host read the same row.
    """

    connection = models.CharField(max_length=64, unique=True)
    generation = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "kinetis_queue_restart_markers"
        verbose_name = "restart marker"

    def __str__(self) -> str:
        return f"restart generation {self.generation} of {self.connection}"


# The django.tasks result store lives in its own module (it must not import django.tasks itself).
from kinetis_queue.contrib.tasks.results import TaskResultRecord  # noqa: E402
from kinetis_queue.control.models import Cancellation, PausedQueue  # noqa: E402
from kinetis_queue.limits.models import LimitSlot  # noqa: E402
from kinetis_queue.observability.models import HistoryMinute, WorkerRecord  # noqa: E402
from kinetis_queue.outbox.models import OutboxRecord  # noqa: E402
from kinetis_queue.ratelimits.models import RateSlot  # noqa: E402
from kinetis_queue.schedules.models import ScheduleTick  # noqa: E402
from kinetis_queue.unique.models import UniqueLockRecord  # noqa: E402
from kinetis_queue.workflows.models import Workflow, WorkflowMember  # noqa: E402

__all__ = [
    "Cancellation",
    "ExactCharField",
    "FailedJob",
    "HistoryMinute",
    "LimitSlot",
    "OutboxRecord",
    "PausedQueue",
    "QueuedJobRecord",
    "RateSlot",
    "RestartMarker",
    "ScheduleTick",
    "TaskResultRecord",
    "UniqueLockRecord",
    "WorkerRecord",
    "Workflow",
    "WorkflowMember",
]
