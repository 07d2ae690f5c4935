"""Job expiry (docs/expiry.md): a job not started by its expiry is never run.

``expires=`` on a push (``push``, ``push_many``, ``push_on_commit``), an ``expires`` attribute on a Job class and
``@task(expires=...)``: seconds after the push, or an aware datetime. The push stores the moment in the envelope's
metadata; before a delivery's attempt the worker compares it with its own clock (``ExpiryMiddleware.admit()``, the
first check of the delivery side, before the job is even rebuilt), so a late worker never starts an expired job.
An expired delivery is settled without running: acked (JobOutcome.EXPIRED), ``signals.job_expired`` sent, counted
by the metrics and the history, its unique key freed, a chain's step ended as failed; and, when
``KINETIS_QUEUE["RECORD_EXPIRED"]`` is True, a failed-job record written first (so ``queue_retry`` can push it
again).
"""

from __future__ import annotations

import threading
import time
from datetime import datetime
from typing import TYPE_CHECKING, Final

from kinetis_queue import conf, signals
from kinetis_queue.exceptions import InvalidQueueArgumentError, JobExpiredError
from kinetis_queue.failed import ModelRecorder
from kinetis_queue.job import Job, job_class_path
from kinetis_queue.middleware import Middleware, PushDraft
from kinetis_queue.outcomes import JobOutcome, SkipDelivery, WillNeverRun

if TYPE_CHECKING:
    from kinetis_queue.contracts import Queue, QueuedJob

__all__ = ["METADATA_KEY", "ExpiryMiddleware", "JobExpired", "expires_at"]

#: Where an envelope's metadata carries the moment the job expires (Unix seconds).
METADATA_KEY: Final = "kinetis_queue.expires"
#: The longest expiry in seconds after the push (30 days).
MAX_EXPIRES: Final = 30 * 86_400


class JobExpired(WillNeverRun):
    """Raised in place of a delivery's attempt whose job expired before it started (JobOutcome.EXPIRED);
    ``signals.job_expired`` is sent once its ack was accepted."""

    outcome = JobOutcome.EXPIRED
    signal = signals.job_expired

    def __init__(self, late: float) -> None:
        super().__init__(f"it expired {late:.3g}s before this delivery")


def expires_at(value: object, now: float, where: str) -> float:
    """The Unix time ``value`` names: seconds after ``now`` (above 0, at most MAX_EXPIRES) or an aware datetime;
    InvalidQueueArgumentError naming ``where`` otherwise (never the value)."""
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidQueueArgumentError(f"{where} must be an aware datetime (a naive one names no moment)")
        return value.timestamp()
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value <= MAX_EXPIRES:
        raise InvalidQueueArgumentError(
            f"{where} must be a number of seconds above 0, at most {MAX_EXPIRES}, or an aware datetime"
        )
    return now + float(value)


#: Per Job class: its ``expires`` attribute (None: none), checked once.
_declared: dict[type[Job], object] = {}
_declared_lock = threading.Lock()


def declared_expiry(cls: type[Job]) -> object:
    """The class's ``expires`` attribute (seconds or an aware datetime), None when it has none; checked once."""
    try:
        return _declared[cls]
    except KeyError:
        pass
    value = getattr(cls, "expires", None)
    if value is not None:
        expires_at(value, time.time(), f"{job_class_path(cls)}.expires")
    with _declared_lock:
        _declared[cls] = value
    return value


class ExpiryMiddleware(Middleware):
    """Job expiry in the chain (kinetis_queue.middleware). On the push side: the push's ``expires`` (else its
    class's) checked against the push's delay and written into its metadata. Around deliveries: ``admit()``
    skips an expired job (JobExpired); ``skipped()`` records it first when RECORD_EXPIRED asks."""

    options = frozenset({"expires"})

    def __init__(self) -> None:
        self.queue: Queue | None = None

    def prepare(self, draft: PushDraft) -> None:
        given = draft.options.get("expires") if draft.options else None
        value = given if given is not None else declared_expiry(type(draft.job))
        if value is None:
            return
        now = time.time()
        at = expires_at(value, now, "expires" if given is not None else f"{draft.job_class}.expires")
        if at <= now + draft.delay:
            raise InvalidQueueArgumentError(
                "expires comes before the job is due (its delay): it would never run; push with a later expiry"
            )
        draft.metadata[METADATA_KEY] = at

    def start(self, queue: Queue) -> None:
        self.queue = queue

    def admit(self, job: QueuedJob) -> None:
        metadata = job.metadata
        if not metadata:
            return
        at = metadata.get(METADATA_KEY)
        if at is None or type(at) not in (int, float):  # tampered metadata: the job is not treated as expiring
            return
        late = time.time() - at
        if late >= 0:
            raise JobExpired(late)

    def skipped(self, job: QueuedJob, skipped: SkipDelivery) -> None:
        if not isinstance(skipped, JobExpired):
            return
        connection = self.queue.connection if self.queue is not None else None
        if conf.load().record_expired:
            ModelRecorder().record(job, JobExpiredError(skipped.reason), connection)
