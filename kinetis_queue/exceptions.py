"""The errors kinetis_queue raises; every message names what is wrong, never a job argument value."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured

if TYPE_CHECKING:
    from kinetis_queue.contracts import JobSettlement


class KinetisQueueError(Exception):
    """Base class of every error kinetis_queue raises."""


class QueueConfigurationError(KinetisQueueError, ImproperlyConfigured):
    """The KINETIS_QUEUE setting, or a worker option, holds a value that cannot be used."""


class InvalidQueueArgumentError(KinetisQueueError, ValueError):
    """A queue name, queue list, delay, timeout or attempt count is invalid; nothing was sent."""


class UnserializableJobError(KinetisQueueError, TypeError):
    """A job argument has no wire form, or a parameter has no same-named attribute; nothing was sent."""


class UnrunnableJobError(KinetisQueueError, TypeError):
    """push() got a job no worker could run: no handle(), a handle() the worker cannot call, or a class a
    worker cannot find by its dotted path (defined in ``__main__``, the shell or a function); nothing was sent."""


class QueueTablesMissingError(KinetisQueueError):
    """The kinetis_queue tables do not exist in a database (``manage.py migrate`` was not run there)."""

    def __init__(self, alias: str, tables: list[str]) -> None:
        self.alias = alias
        self.tables = tables
        where = "" if alias == "default" else f" --database {alias}"
        super().__init__(
            f"the kinetis_queue tables are missing in database {alias!r} ({', '.join(tables)}): "
            f"run `manage.py migrate{where}`"
        )


class DuplicateJobError(KinetisQueueError):
    """A unique job's key is held by another job (a push with ``on_duplicate="raise"``); nothing was stored.

    ``job_id`` is the holder's id. The key itself is never shown: it may be built from argument values.
    """

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f"job {job_id} holds this unique key; nothing was stored")


class UnknownLockDatabaseError(KinetisQueueError):
    """A delivered unique job's lock names a Django database other than the one the worker's settings give its
    connection's locks (an alias renamed or removed since the push, or metadata not written by kinetis_queue).

    The worker cannot free that lock, and never looks it up in a database a payload names: the job fails
    at once, without running and without retries, and is recorded (the key frees itself at ``unique_for``).
    """

    def __init__(self, stored: str, expected: str | None, connection: str | None) -> None:
        where = "its own store" if expected is None else f"database {expected!r}"
        super().__init__(
            f"its unique lock names database {stored[:100]!r}, but connection {connection or 'default'!r} keeps "
            f"its unique locks in {where} (the settings changed since the push?); push the job again"
        )


class JobReconstructionError(KinetisQueueError):
    """The stored class or arguments no longer match the code; handled as the job's own failure."""


class UnresolvableJobParameterError(KinetisQueueError):
    """A handle() parameter is neither JobContext nor resolvable; handled as the job's own failure."""


class MalformedQueuedJobDataError(KinetisQueueError):
    """A stored message does not decode into a job (bad JSON, wrong shape, out-of-range counter)."""


class MalformedJobSettledError(KinetisQueueError):
    """A reserved message failed to decode and was removed from the backend."""


class StaleJobHandleError(KinetisQueueError):
    """A fenced settlement named a delivery that is no longer reserved; nothing was written."""

    def __init__(self, operation: JobSettlement, message: str | None = None) -> None:
        self.operation = operation
        super().__init__(
            message
            or f"{operation.name.lower()}() named a delivery that is no longer reserved (stale handle); "
            "nothing was written"
        )


class QueueUnavailableError(KinetisQueueError):
    """A connection names a backend whose client library is not installed."""


class QueueNotClearableError(KinetisQueueError):
    """The connection's backend cannot clear a queue (it is not a ClearableQueue)."""


class PublishNotConfirmedError(KinetisQueueError):
    """RabbitMQ did not acknowledge a publish; whether the message was queued is unknown."""


class ConnectionFailedError(KinetisQueueError):
    """A command was never dispatched to the backend; its state is unchanged."""


class OutcomeUnknownError(KinetisQueueError):
    """A command was written and no reply arrived; the backend may or may not have applied it."""


class OutboxRefusedError(KinetisQueueError):
    """The store refused a relayed outbox row for good (no such queue, too large, an argument it rejects):
    the relay recorded the job as failed, with this error, and removed the row (docs/outbox.md)."""


class JobExpiredError(KinetisQueueError):
    """The job was not started by its expiry (kinetis_queue.expiry): the exception of its failed-job record, written
    only when KINETIS_QUEUE["RECORD_EXPIRED"] asks for one. It never ran."""


class JobTimeoutError(KinetisQueueError):
    """The attempt ran past the worker's ``--timeout``; handled as the job's own failure (retry rules apply)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(f"the attempt ran past the worker's --timeout of {seconds:g}s")


class JobTimeoutInterrupt(BaseException):
    """Raised inside ``handle()`` when the attempt's ``--timeout`` passes.

    It derives from BaseException so that a handler's ``except Exception`` does not swallow it;
    ``finally`` blocks and context managers still run. The worker records the attempt as failed
    with JobTimeoutError.
    """
