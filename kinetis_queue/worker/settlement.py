"""The settlement step of one delivery: the one transition the worker makes for it, and its report.

After handle() returned or raised, exactly one of: ack (success), release with a retry delay,
record then fail (attempts exhausted), or store a replacement then ack (``Snooze``). A settlement
refused as stale is a lost delivery, never an error of the worker. Each outcome is logged and
signalled afterwards; logs and signals are observers and cannot change it (contract: "Worker
lifecycle"). Argument values reach neither: kinetis_queue.payload.redaction decides what they show.
"""

from __future__ import annotations

import time
from typing import Any, Final, Protocol

from kinetis_queue import crashpoints, signals
from kinetis_queue.contracts import JobSettlement, PreparedPush, Queue, QueuedJob
from kinetis_queue.exceptions import StaleJobHandleError
from kinetis_queue.failed import MAX_RECORDED_TEXT, FailedJobRecorder, exception_text, storable
from kinetis_queue.hooks import DeliveryHooks
from kinetis_queue.job import Snooze
from kinetis_queue.outcomes import AtLimit, JobOutcome, SkipDelivery
from kinetis_queue.payload.envelope import RETRY_KEY as RETRY_KEY  # its home: the stored form of a job
from kinetis_queue.payload.envelope import Envelope
from kinetis_queue.payload.redaction import display_json, for_observers, scrub_for
from kinetis_queue.validation import MAX_RETRY_DELAY
from kinetis_queue.values import PERMANENT_ERRORS
from kinetis_queue.worker.heartbeat import RenewalReport
from kinetis_queue.worker.log import attempt_of, contained, describe, job_name, logger

#: The doubling stops here so a high attempt count cannot overflow.
MAX_RETRY_EXPONENT: Final = 10
#: The metadata key counting a job's snoozes (kinetis_queue.job.Snooze); absent on a plain push.
SNOOZES_KEY: Final = "kinetis_queue.snoozes"
#: The backoff rules a RETRY_KEY may name: doubling from the delay (the worker's rule), or the delay each time.
BACKOFFS: Final = ("exponential", "fixed")


def retry_delay(attempt: int, base: float) -> float:
    """Seconds before the next attempt after ``attempt`` failed.

    min(MAX_RETRY_DELAY, base * 2 ** min(attempt - 1, 10)): doubling, capped.
    """
    return float(min(MAX_RETRY_DELAY, base * 2 ** min(max(attempt, 1) - 1, MAX_RETRY_EXPONENT)))


def job_retry_delay(job: QueuedJob, base: float) -> float:
    """Seconds before the retry of ``job`` after its attempt failed: its own rule (RETRY_KEY) where its
    metadata carries a valid one, else the worker's (``base``, doubling). An invalid rule is ignored."""
    rule = job.metadata.get(RETRY_KEY)
    if type(rule) is dict:
        delay = rule.get("delay")
        if isinstance(delay, (int, float)) and type(delay) is not bool and 0 <= delay <= MAX_RETRY_DELAY:
            base = float(delay)
        if rule.get("backoff") == "fixed":
            return float(base)
    return retry_delay(job.attempts, base)


def snoozes_of(job: QueuedJob) -> int:
    """How many times ``job`` was snoozed before this delivery (0 when its metadata does not say)."""
    value = job.metadata.get(SNOOZES_KEY, 0)
    return value if type(value) is int and value >= 0 else 0


class SettlementPolicy(Protocol):
    """What settling needs to know of its worker, read at each settlement (kinetis_queue.worker.Worker)."""

    queue: Queue
    connection: str | None
    default_max_attempts: int
    retry_base_delay: float
    recorder: FailedJobRecorder | None
    hooks: DeliveryHooks


class Settler:
    """Settles the deliveries of one worker, under that worker's policy."""

    def __init__(self, policy: SettlementPolicy) -> None:
        self.policy = policy

    def snooze(self, job: QueuedJob, snooze: Snooze, report: RenewalReport | None) -> JobOutcome:
        """Store the delivery's replacement (same id, attempts over, one more snooze), then ack it.

        The order is RabbitMQ's own release (publish, then settle): a crash in between leaves two
        copies, never none. A failing push propagates with this delivery unsettled (redelivered).
        """
        queue = self.policy.queue
        metadata = {**job.metadata, SNOOZES_KEY: snoozes_of(job) + 1}
        replacement = Envelope(job.id, time.time(), job.job_class, job.args, 0, job.max_attempts, metadata)
        try:
            queue.send(PreparedPush(replacement, snooze.delay, job.queue))
            try:
                queue.ack(job)
            except StaleJobHandleError as stale:
                contained(
                    logger.warning,
                    'Job "%s" (attempt %d): ack() after its snooze was refused as stale; another delivery owns it',
                    job_name(job),
                    job.attempts,
                    extra=describe(job),
                )
                self.send(signals.job_settlement_lost, job, operation=JobSettlement.ACK, error=stale, exception=None)
                return JobOutcome.LOST
            contained(
                logger.info,
                'Job "%s" snoozed (attempt %d), back in %gs: %s',
                job_name(job),
                job.attempts,
                snooze.delay,
                snooze.reason,
                extra=describe(job),
            )
            self.send(signals.job_released, job, exception=snooze, delay=snooze.delay)
            return JobOutcome.SNOOZED
        finally:
            _log_renewal_failures(job, report)

    def before_success(self, job: QueuedJob) -> None:
        """Before the ack of a success: the hooks' (a workflow advances, a unique job's key is freed); an error
        there propagates and nothing is settled, as a failed-job record's."""
        self.policy.hooks.succeeding(job)

    def skip(self, job: QueuedJob, skipped: SkipDelivery, report: RenewalReport | None) -> JobOutcome:
        """Ack a delivery that must not run (cancelled, superseded, done already), without running it."""
        try:
            self.policy.hooks.skipped(job, skipped)  # its model gone: it never started, its unique key is freed
            try:
                self.policy.queue.ack(job)
            except StaleJobHandleError as stale:
                return self._lost(job, JobSettlement.ACK, stale, None)
            contained(
                logger.info,
                'Job "%s" %s (attempt %d): %s',
                job_name(job),
                skipped.outcome.value,
                job.attempts,
                skipped.reason,
                extra=describe(job),
            )
            if skipped.signal is not None:
                self.send(skipped.signal, job)
            return skipped.outcome
        finally:
            _log_renewal_failures(job, report)

    def defer(self, job: QueuedJob, at_limit: AtLimit, report: RenewalReport | None) -> JobOutcome:
        """Give back a delivery whose concurrency key is at its limit, for ``at_limit.delay`` seconds:
        ``unreserve()``, so no attempt is charged (kinetis_queue.limits)."""
        try:
            try:
                self.policy.queue.unreserve(job, at_limit.delay)
            except StaleJobHandleError as stale:
                return self._lost(job, JobSettlement.UNRESERVE, stale, None)
            contained(
                logger.warning if at_limit.unexpected else logger.debug,
                'Job "%s" waits (attempt %d): %s; back in %gs',
                job_name(job),
                job.attempts,
                at_limit,
                at_limit.delay,
                extra=describe(job),
            )
            return JobOutcome.DEFERRED
        finally:
            _log_renewal_failures(job, report)

    def failure(
        self, job: QueuedJob, error: BaseException, report: RenewalReport | None
    ) -> tuple[JobOutcome, float | None]:
        """Release ``job`` for a retry while attempts remain, else record it and fail it; the outcome
        and the retry delay (None when not released)."""
        cap = job.max_attempts if job.max_attempts is not None else self.policy.default_max_attempts
        message = scrubbed_message(job, error)
        # An argument that cannot decode, or a model row that is gone, fails at once: no retry can
        # change it (kinetis_queue.values; the spec: "Malformed or unreconstructable payloads fail immediately").
        if job.attempts < cap and not isinstance(error, PERMANENT_ERRORS):
            delay = job_retry_delay(job, self.policy.retry_base_delay)
            contained(
                logger.warning,
                'Job "%s" failed (attempt %d), retrying in %gs: %s: %s',
                job_name(job),
                job.attempts,
                delay,
                type(error).__name__,
                message,
                extra=describe(job),
            )
            return self.settle(job, JobSettlement.RELEASE, error, report, delay=delay), delay
        contained(
            logger.error,
            'Job "%s" failed permanently (%s): %s: %s; arguments: %s',
            job_name(job),
            attempt_of(job.attempts, cap),
            type(error).__name__,
            message,
            display_json(job.job_class, job.args),
            extra=describe(job),
        )
        # Contract, "Recording a job before fail()": a record() error propagates, nothing is settled.
        recorder = self.policy.recorder
        failed_job_id = recorder.record(job, error, self.policy.connection) if recorder is not None else None
        crashpoints.reach("after_record")
        self.policy.hooks.failing(job)  # a workflow's failure, a unique job's key freed
        return self.settle(job, JobSettlement.FAIL, error, report, failed_job_id=failed_job_id), None

    def settle(
        self,
        job: QueuedJob,
        operation: JobSettlement,
        error: BaseException | None,
        report: RenewalReport | None,
        *,
        delay: float = 0,
        failed_job_id: Any = None,
        log_context: dict[str, Any] | None = None,
    ) -> JobOutcome:
        """Make ``operation`` on the delivery, then log and signal what it became."""
        try:
            try:
                self._apply(job, operation, delay)
            except StaleJobHandleError as stale:
                return self._lost(job, operation, stale, error)
            if operation is JobSettlement.ACK:
                return self._succeeded(job, log_context)
            if operation is JobSettlement.RELEASE:
                self.send(signals.job_released, job, exception=error, delay=delay)
                return JobOutcome.RELEASED
            self.send(
                signals.job_failed_permanently,
                job,
                exception=error,
                failed_job_id=failed_job_id,
                args=display_json(job.job_class, job.args),
            )
            return JobOutcome.FAILED
        finally:
            _log_renewal_failures(job, report)

    def acked(
        self,
        job: QueuedJob,
        stale: StaleJobHandleError | None,
        report: RenewalReport | None,
        log_context: dict[str, Any] | None = None,
    ) -> JobOutcome:
        """Log and signal what a deferred ack (kinetis_queue.worker.acks) became: None, acked; else refused."""
        try:
            if stale is not None:
                return self._lost(job, JobSettlement.ACK, stale, None)
            return self._succeeded(job, log_context)
        finally:
            _log_renewal_failures(job, report)

    def _succeeded(self, job: QueuedJob, log_context: dict[str, Any] | None) -> JobOutcome:
        contained(
            logger.info,
            'Job "%s" succeeded (attempt %d)',
            job_name(job),
            job.attempts,
            extra=log_context or describe(job),
        )
        self.send(signals.job_succeeded, job)
        return JobOutcome.SUCCEEDED

    def _lost(
        self, job: QueuedJob, operation: JobSettlement, stale: StaleJobHandleError, error: BaseException | None
    ) -> JobOutcome:
        contained(
            logger.warning,
            'Job "%s" (attempt %d): %s() was refused as stale; another delivery owns it',
            job_name(job),
            job.attempts,
            operation.value,
            extra=describe(job),
        )
        self.send(signals.job_settlement_lost, job, operation=operation, error=stale, exception=error)
        return JobOutcome.LOST

    def _apply(self, job: QueuedJob, operation: JobSettlement, delay: float) -> None:
        queue = self.policy.queue
        if operation is JobSettlement.ACK:
            queue.ack(job)
        elif operation is JobSettlement.RELEASE:
            queue.release(job, delay)
        else:
            queue.fail(job)

    def send(self, signal_: Any, job: QueuedJob, **kwargs: Any) -> None:
        """Send ``signal_`` about ``job`` to every receiver; whatever a receiver raises is logged, not raised."""
        if not signal_.receivers:
            return
        try:
            # Receivers see the job as redaction allows; the delivery is settled by the time they run.
            responses = signal_.send_robust(
                type(self.policy.queue), job=for_observers(job), connection=self.policy.connection, **kwargs
            )
        except Exception as exc:
            contained(logger.error, "A %s receiver setup failed: %r", "signal", exc)
            return
        for receiver, response in responses:
            if isinstance(response, BaseException):
                contained(
                    logger.error,
                    "Signal receiver %r raised %s (contained)",
                    receiver,
                    type(response).__name__,
                    extra=describe(job),
                )


def _log_renewal_failures(job: QueuedJob, report: RenewalReport | None) -> None:
    if report is not None and report.failures:
        contained(
            logger.error,
            'Job "%s" (attempt %d): %d lease renewal(s) failed; last: %r',
            job_name(job),
            job.attempts,
            report.failures,
            report.last_error,
            extra=describe(job),
        )


def scrubbed_message(job: QueuedJob, error: BaseException) -> str:
    """The exception's message with any Sensitive argument's value replaced, escaped and cut as a
    failed-job record stores it (a lone surrogate would break a UTF-8 log stream). A job's __str__ that
    raises is exception_text()'s to handle; the stored arguments are plain JSON values, whose scrubbing cannot raise."""
    return storable(scrub_for(job.job_class, job.args, exception_text(error)), MAX_RECORDED_TEXT, lines=True)
