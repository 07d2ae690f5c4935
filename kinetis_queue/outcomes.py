"""What a worker reports: why ``Worker.run()`` returned, how each delivery ended (the per-job report), and the
markers raised in place of an attempt that does not run (skipped, deferred). A leaf: it imports nothing of the
package, so the contract, the worker and every feature name the same outcomes."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, Final


class ExitReason(StrEnum):
    """Why run() returned (SqueHub's worker exit reasons). Every one but ERROR is a controlled exit."""

    #: ``once``: one delivery was processed.
    COMPLETED = "completed"
    #: ``once`` or ``stop_when_empty``: a pop found nothing.
    EMPTY = "empty"
    MAX_JOBS = "max_jobs"
    MAX_TIME = "max_time"
    MEMORY = "memory"
    #: The connection's restart marker moved (``queue_restart``).
    RESTART = "restart"
    #: stop(), SIGTERM or SIGINT.
    SHUTDOWN = "shutdown"
    #: An exception escaped (a settlement, record() or the backend failed): not a controlled exit.
    ERROR = "error"


class JobOutcome(StrEnum):
    """The transition one delivery ended with, as the per-job report names it."""

    SUCCEEDED = "succeeded"
    RELEASED = "released"
    FAILED = "failed"
    LOST = "lost"
    #: The job raised Snooze: a replacement was stored, then this delivery acked (kinetis_queue.job.Snooze).
    SNOOZED = "snoozed"
    #: Acked without running: a debounced push superseded this delivery (kinetis_queue.unique), or the job
    #: was cancelled (kinetis_queue.control).
    SKIPPED = "skipped"
    #: Given back unstarted, no attempt charged: its concurrency key was at its limit (kinetis_queue.limits),
    #: or its queue was paused after the delivery was reserved (kinetis_queue.control).
    DEFERRED = "deferred"
    #: Acked without running: the job was not started by its expiry (kinetis_queue.expiry).
    EXPIRED = "expired"


@dataclass(slots=True)
class JobReport:
    """One processed delivery, for a per-job output line and the hooks that want it: never the job's
    arguments. Read-only by convention: not frozen, as a frozen dataclass costs a delivery a microsecond to
    build (bench/observability.py)."""

    job_class: str
    queue: str
    job_id: str
    attempt: int
    outcome: JobOutcome
    #: Seconds from taking the delivery to its settlement.
    duration: float
    #: The job's exception class name, on a failure.
    error: str | None = None
    #: The retry delay, when released; the snooze delay, when snoozed.
    delay: float | None = None
    #: What operators see the job as: the task or receiver it carries, else ``job_class``.
    name: str = ""


#: Seconds a delivery waits before it is tried again when a store its admission needs (a concurrency slot's, a
#: unique lock's) failed before its attempt (AtLimit, unexpected).
STORE_FAILURE_DELAY: Final = 5.0


class SkipDelivery(Exception):  # a marker, not an error
    """Raised in place of a delivery's attempt that must not run (cancelled, superseded, done already):
    the delivery is acked without running (JobOutcome.SKIPPED, or the subclass's ``outcome``). ``reason`` is
    logged; ``signal``, when a subclass names one, is sent once the ack was accepted."""

    #: What the delivery became.
    outcome: ClassVar[JobOutcome] = JobOutcome.SKIPPED
    #: The outcome signal sent after the ack (a django.dispatch.Signal), or None: a plain skip sends none.
    signal: ClassVar[Any] = None

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class WillNeverRun(SkipDelivery):
    """A skip of a job that never started and never will (its model is gone, it expired): whatever it holds for
    a start (a unique key of scope "started" or "settled") is freed, and a chain's step ends as failed."""


class AtLimit(Exception):  # a marker, not an error
    """Raised in place of a delivery's attempt when it may not start now: its key is at its limit, its queue
    was paused after the reservation, or the store that decides could not be reached. The delivery is given
    back with ``Queue.unreserve(job, delay)`` (JobOutcome.DEFERRED), no attempt charged; ``reason`` is logged
    (a warning when ``unexpected``)."""

    def __init__(self, delay: float, reason: str, *, unexpected: bool = False) -> None:
        super().__init__(reason)
        self.delay = delay
        self.unexpected = unexpected
