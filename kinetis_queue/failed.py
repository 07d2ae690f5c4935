"""Failed jobs: the record the worker writes before fail(), and the operator's operations on those records.

The commands (``queue_failed``, ``queue_retry``, ``queue_forget``, ``queue_prune``) and the admin
actions are thin wrappers around the functions here, so both behave the same way.

What a record may show: its class, connection, queue, counters, exception class and time are safe
metadata. The arguments are kept raw (a retry needs them) and are only ever displayed redacted per
``Sensitive``. The exception message and traceback say only what the exception itself says (no
local variables), and any Sensitive argument's value found in them is replaced by ``[redacted]``
before they are stored. What may be shown of a record is decided in kinetis_queue.payload.redaction.
"""

from __future__ import annotations

import re
import traceback as traceback_module
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Final, Protocol

from django.db import router
from django.utils import timezone

from kinetis_queue import connections
from kinetis_queue.contracts import QueuedJob
from kinetis_queue.db.transactions import write_atomic
from kinetis_queue.exceptions import InvalidQueueArgumentError, MalformedQueuedJobDataError
from kinetis_queue.payload.envelope import RETRY_KEY, TIMEOUT_KEY, decode_args, decode_metadata, dumps, loads
from kinetis_queue.payload.printable import escape
from kinetis_queue.payload.redaction import scrub, sensitive_values
from kinetis_queue.payload.serializer import deserialize_job
from kinetis_queue.priority import DEFAULT_PRIORITY, priority_of
from kinetis_queue.validation import validate_max_attempts, validate_queue_name

if TYPE_CHECKING:
    from kinetis_queue.models import FailedJob

#: ``queue_failed`` lists at most this many records (SqueHub: "at most 100 rows of safe metadata").
MAX_LISTED: Final = 100
#: ``queue_prune`` removes records strictly older than this many hours by default (seven days).
DEFAULT_PRUNE_HOURS: Final = 168


class FailedJobRecorder(Protocol):
    """Writes a durable record of a job the worker gives up on; returns the record's id."""

    def record(self, job: QueuedJob, exception: BaseException, connection: str | None) -> int | str | None: ...


class ModelRecorder:
    """Records into the FailedJob model (table kinetis_queue_failed_jobs), whatever the backend.

    The text it stores never makes the write fail: every text goes through ``storable()`` (so no
    database refuses a character or a length), and an exception whose ``str()`` or traceback cannot
    be produced is recorded with a note saying so. Only the database itself can fail the write.
    """

    def record(self, job: QueuedJob, exception: BaseException, connection: str | None) -> int:
        from kinetis_queue.models import FailedJob

        def line(name: str, value: str) -> str:
            width: int = getattr(FailedJob._meta.get_field(name), "max_length", None) or MAX_RECORDED_TEXT
            return storable(value, width)

        secrets = sensitive_values(job.job_class, job.args)
        record = FailedJob.objects.create(
            connection=None if connection is None else line("connection", connection),
            queue=line("queue", job.queue),
            job_id=line("job_id", job.id),
            job_class=line("job_class", job.job_class),
            args=dumps(job.args),
            metadata=dumps(job.metadata),
            max_attempts=job.max_attempts,
            attempts=job.attempts,
            exception_class=line("exception_class", exception_class_path(exception)),
            exception_message=storable(scrub(exception_text(exception), secrets), MAX_RECORDED_TEXT, lines=True),
            traceback=storable(scrub(format_traceback(exception), secrets), MAX_RECORDED_TEXT, lines=True),
        )
        return record.pk


def exception_class_path(exception: BaseException) -> str:
    """The dotted path of the exception's class (module.QualName)."""
    cls = type(exception)
    try:
        return f"{cls.__module__}.{cls.__qualname__}"
    except BaseException:  # a class can set __module__ to anything
        return cls.__qualname__


def exception_text(exception: BaseException) -> str:
    """``str(exception)``, or a note naming what ``str()`` raised instead: a broken __str__ never stops a record."""
    try:
        return str(exception)
    except BaseException as exc:
        return f"(the exception's message is unavailable: str() raised {type(exc).__qualname__})"


def format_traceback(exception: BaseException) -> str:
    """The exception's traceback as Python prints it: frames, source lines and messages, no locals."""
    try:
        return "".join(traceback_module.format_exception(exception))
    except BaseException:  # a broken __str__ or a formatter error must not stop the record
        return f"{exception_class_path(exception)} (traceback unavailable)"


# -- text every database stores ------------------------------------------------------------------------

#: Ends a recorded text that was cut to its column's width.
TRUNCATION_MARKER: Final = "...[truncated]"
#: Most characters a record keeps of an exception message or a traceback: far above a useful
#: traceback, far below any database's packet or row limit.
MAX_RECORDED_TEXT: Final = 65_536
#: What no database stores as text, or what a one-line field should not carry: NUL (PostgreSQL
#: refuses it), lone surrogates (not UTF-8, refused by every driver), and control characters (a
#: listing printed to a terminal must not carry escape sequences). A multi-line text keeps tab,
#: newline and carriage return.
_UNSTORABLE_IN_TEXT = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_UNSTORABLE_IN_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def storable(text: str, limit: int, *, lines: bool = False) -> str:
    """``text`` as every supported database stores it: unstorable characters escaped visibly (NUL as
    ``\\x00``, a lone surrogate as ``\\ud800``), then cut to ``limit`` characters ending in TRUNCATION_MARKER."""
    text = (_UNSTORABLE_IN_TEXT if lines else _UNSTORABLE_IN_LINE).sub(escape, text)
    if len(text) > limit:
        text = text[: max(limit - len(TRUNCATION_MARKER), 0)] + TRUNCATION_MARKER[:limit]
    return text


def record_args(record: FailedJob) -> dict[str, Any]:
    """The record's stored arguments, decoded strictly (MalformedQueuedJobDataError when tampered)."""
    return decode_args(loads(record.args))


def record_metadata(record: FailedJob) -> dict[str, Any]:
    """The record's stored metadata, decoded strictly; empty when it does not decode (a tampered record)."""
    try:
        return decode_metadata(loads(record.metadata))
    except MalformedQueuedJobDataError:
        return {}


def record_priority(record: FailedJob) -> int:
    """The priority the record's job was pushed with (kinetis_queue.priority); 0 when none or tampered."""
    return priority_of(record_metadata(record))


def kept_options(record: FailedJob) -> dict[str, Any]:
    """The per-job options the record's job carried in its metadata (a ``@task``'s retry rule and time
    limit), for its retry; each is validated where the worker reads it, like any pushed job's.

    Queue, max_attempts and priority are push arguments of their own; a class's ``unique_for`` is applied
    by prepare(), as for any push.
    """
    metadata = record_metadata(record)
    return {key: metadata[key] for key in (RETRY_KEY, TIMEOUT_KEY) if key in metadata}


def shown_class(record: FailedJob) -> str:
    """What the operator sees as the record's job: the task or receiver it carried, else its class path."""
    return record.shown_class()


# -- the operator's operations ------------------------------------------------------------------------


@dataclass(frozen=True)
class FailedJobRow:
    """Safe metadata of one record: never the arguments, the exception message or the traceback."""

    id: int
    failed_at: datetime
    connection: str | None
    queue: str
    job_class: str
    exception_class: str
    attempts: int
    max_attempts: int | None
    #: What operators see as the job: the task or receiver it carried, else ``job_class`` (shown_class).
    name: str = ""


def list_failed(
    *, connection: str | None = None, queue: str | None = None, limit: int = MAX_LISTED
) -> list[FailedJobRow]:
    """The newest records (at most ``limit``, never more than MAX_LISTED), as safe metadata only."""
    from kinetis_queue.models import FailedJob

    records = FailedJob.objects.all()
    if connection is not None:
        records = records.filter(connection=connection)
    if queue is not None:
        records = records.filter(queue=queue)
    fields = ("id", "failed_at", "connection", "queue", "job_class", "exception_class", "attempts", "max_attempts")
    found = records.order_by("-failed_at", "-id").only(*fields, "args")[: min(limit, MAX_LISTED)]
    return [
        FailedJobRow(
            record.pk,
            record.failed_at,
            record.connection,
            record.queue,
            record.job_class,
            record.exception_class,
            record.attempts,
            record.max_attempts,
            shown_class(record),
        )
        for record in found
    ]


@dataclass(frozen=True)
class RetryOutcome:
    """What ``retry()`` did with one record: the new job's id, or why nothing was pushed."""

    failed_job_id: int
    job_id: str | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.job_id is not None


def retry(failed_job_id: int) -> RetryOutcome:
    """Push the record's job again to its connection and queue, attempts reset; then remove the record.

    The job keeps every option it was pushed with: its queue and max_attempts, its priority where the
    connection orders by priority (docs/priority.md, else 0), and a ``@task``'s retry rule and time limit
    (kept_options). A class whose ``unique_for`` is set takes its key again, as push() would (the
    holder's id comes back when it is held).

    The stored class and arguments are first rebuilt and re-serialized under the argument contract,
    so a tampered record pushes nothing. The record is removed only after the push returned; a push
    that raises leaves it intact. The record's row is locked for the whole operation, so two
    concurrent retries of one record push once. When the connection is the SQL backend on the
    record's own database, the push and the removal commit together; on any other store a crash
    between them leaves the job pushed and the record in place (retrying it again pushes a copy).
    """
    from kinetis_queue.models import FailedJob

    alias = router.db_for_write(FailedJob)
    try:
        with write_atomic(alias):
            record = FailedJob.objects.using(alias).select_for_update().filter(pk=failed_job_id).first()
            if record is None:
                return RetryOutcome(failed_job_id, error=f"there is no failed job with id {failed_job_id}")
            queue_name = validate_queue_name(record.queue)
            max_attempts = validate_max_attempts(record.max_attempts)
            job = deserialize_job(record.job_class, record_args(record))
            queues = connections.queues
            target = queues.default() if record.connection is None else queues[record.connection]
            priority = record_priority(record) if target.supports_priority else DEFAULT_PRIORITY
            prepared = target.prepare(job, queue=queue_name, max_attempts=max_attempts, priority=priority)
            kept = kept_options(record)
            if kept:
                envelope = replace(prepared.envelope, metadata={**prepared.envelope.metadata, **kept})
                prepared = replace(prepared, envelope=envelope)
            job_id = target.send(prepared)
            record.delete()
    except Exception as exc:
        return RetryOutcome(failed_job_id, error=f"{type(exc).__name__}: {exc}")
    return RetryOutcome(failed_job_id, job_id=job_id)


def forget(failed_job_id: int) -> bool:
    """Remove one record; False when there was none with that id."""
    from kinetis_queue.models import FailedJob

    deleted, _ = FailedJob.objects.filter(pk=failed_job_id).delete()
    return deleted > 0


def prune(hours: float = DEFAULT_PRUNE_HOURS, *, now: datetime | None = None) -> int:
    """Remove records strictly older than ``hours``; return how many."""
    from kinetis_queue.models import FailedJob

    if type(hours) not in (int, float) or not hours > 0:
        raise InvalidQueueArgumentError("hours must be a positive number")
    cutoff = (now or timezone.now()) - timedelta(hours=hours)
    deleted, _ = FailedJob.objects.filter(failed_at__lt=cutoff).delete()
    return deleted


def failed_counts(default_connection: str) -> dict[tuple[str, str], int]:
    """Records per (connection, queue); a record of the unnamed default connection counts under its name."""
    from django.db.models import Count

    from kinetis_queue.models import FailedJob

    counts: dict[tuple[str, str], int] = {}
    for row in FailedJob.objects.values("connection", "queue").annotate(n=Count("id")).order_by():
        key = (row["connection"] or default_connection, row["queue"])
        counts[key] = counts.get(key, 0) + row["n"]
    return counts
