"""The worker: pops one delivery at a time and makes exactly one transition for it.

It follows the contract's "Worker lifecycle" step by step: pop; start the heartbeat on a
RenewableQueue; rebuild the job and run handle() (any exception there is the job's own failure);
stop the heartbeat; settle (recording a final failure first); then report the outcome through
logs and signals, which are observers and can never change it.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any, Final

from django.db import connections
from django.utils import timezone, translation

from kinetis_queue import signals
from kinetis_queue.contracts import JobSettlement, Queue, QueuedJob, RenewableQueue
from kinetis_queue.envelope import dumps
from kinetis_queue.exceptions import InvalidQueueArgumentError, MalformedJobSettledError, StaleJobHandleError
from kinetis_queue.failed import FailedJobRecorder, ModelRecorder
from kinetis_queue.heartbeat import Heartbeat, RenewalReport
from kinetis_queue.job import JobContext, call_handle
from kinetis_queue.serializer import deserialize_job, redacted_args
from kinetis_queue.validation import validate_timeout

logger = logging.getLogger("kinetis_queue.worker")

#: The retry delay's ceiling: worker policy, not a backend limit.
MAX_RETRY_DELAY: Final = 900
#: The doubling stops here so a high attempt count cannot overflow.
MAX_RETRY_EXPONENT: Final = 10

_DEFAULT_RECORDER: Final = ModelRecorder()


def retry_delay(attempt: int, base: float) -> float:
    """Seconds before the next attempt after ``attempt`` failed: min(900, base * 2 ** min(attempt - 1, 10))."""
    return float(min(MAX_RETRY_DELAY, base * 2 ** min(max(attempt, 1) - 1, MAX_RETRY_EXPONENT)))


def _describe(job: QueuedJob) -> dict[str, Any]:
    return {"job_class": job.job_class, "queue": job.queue, "job_id": job.id, "attempt": job.attempts}


class Worker:
    """Runs jobs from one queue connection (DESIGN.md §4)."""

    def __init__(
        self,
        queue: Queue,
        *,
        connection: str | None = None,
        default_max_attempts: int = 0,
        retry_base_delay: float = 5,
        recorder: FailedJobRecorder | None = _DEFAULT_RECORDER,
    ) -> None:
        if type(default_max_attempts) is not int or default_max_attempts < 0:
            raise InvalidQueueArgumentError("default_max_attempts must be an int of 0 or more")
        if type(retry_base_delay) not in (int, float) or not 0 <= retry_base_delay <= MAX_RETRY_DELAY:
            raise InvalidQueueArgumentError("retry_base_delay must be a number of seconds from 0 to 900")
        self.queue = queue
        self.connection = connection
        self.default_max_attempts = default_max_attempts
        self.retry_base_delay = retry_base_delay
        self.recorder = recorder
        # Contract: the capability is resolved once, in the constructor.
        self._heartbeat = Heartbeat(queue) if isinstance(queue, RenewableQueue) else None
        self._stopping = threading.Event()
        self._in_job = False
        self._language = translation.get_language()
        self.processed = 0

    # -- the loop ---------------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask run() to return once the current process_next() returns."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def run(self, timeout: float, queues: Sequence[str], *, stop_when_empty: bool = False) -> None:
        """Process jobs until stop() (or SIGTERM/SIGINT); with ``stop_when_empty``, until a pop finds nothing."""
        if validate_timeout(timeout) == 0:
            raise InvalidQueueArgumentError(
                "the poll timeout must be positive in run(): 0 would wait forever and never see a stop"
            )
        previous = self._install_signal_handlers()
        try:
            while not self.stopping:
                if not self.process_next(timeout, queues) and stop_when_empty:
                    break
        finally:
            self._restore_signal_handlers(previous)

    def close(self) -> None:
        """End the heartbeat thread; call when the worker is done."""
        if self._heartbeat is not None:
            self._heartbeat.close()

    def _install_signal_handlers(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}
        previous: dict[int, Any] = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, self._on_signal)
        return previous

    @staticmethod
    def _restore_signal_handlers(previous: dict[int, Any]) -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping and self._in_job:
            # A second signal while a job runs: exit now, unsettled; the backend redelivers the job.
            os._exit(128 + signum)
        self.stop()

    # -- one delivery -----------------------------------------------------------------------------

    def process_next(self, timeout: float, queues: Sequence[str]) -> bool:
        """Handle at most one delivery; True when something was processed (a malformed message counts)."""
        try:
            job = self.queue.pop(timeout, queues)
        except MalformedJobSettledError as exc:
            _contained(logger.warning, "%s", exc)
            self.processed += 1
            return True
        if job is None:
            return False
        self._in_job = True
        try:
            self._process(job)
        finally:
            self._in_job = False
        self.processed += 1
        return True

    def _process(self, job: QueuedJob) -> None:
        _reset_connections()
        job_log = logging.LoggerAdapter(logger, _describe(job))
        if self._heartbeat is not None:
            self._heartbeat.start(job)
        error: Exception | None = None
        try:
            instance = deserialize_job(job.job_class, job.args)
            context = JobContext(job.id, job.queue, job.attempts, job.max_attempts, self.connection, job_log)
            call_handle(instance, context)
        except Exception as exc:
            error = exc
        finally:
            report = self._heartbeat.stop() if self._heartbeat is not None else None
            self._restore_process_state()
        try:
            if error is None:
                self._settle(job, JobSettlement.ACK, None, report)
            else:
                self._settle_failure(job, error, report)
        finally:
            _reset_connections()

    def _settle_failure(self, job: QueuedJob, error: Exception, report: RenewalReport | None) -> None:
        cap = job.max_attempts if job.max_attempts is not None else self.default_max_attempts
        if job.attempts < cap:
            delay = retry_delay(job.attempts, self.retry_base_delay)
            _contained(
                logger.warning, 'Job "%s" failed (attempt %d), retrying in %gs: %s: %s',
                job.job_class, job.attempts, delay, type(error).__name__, error, extra=_describe(job),
            )
            self._settle(job, JobSettlement.RELEASE, error, report, delay=delay)
            return
        _contained(
            logger.error, 'Job "%s" failed permanently (attempt %d of %d): %s: %s; arguments: %s',
            job.job_class, job.attempts, cap, type(error).__name__, error, _redacted(job),
            extra=_describe(job),
        )
        # Contract, "Recording a job before fail()": a record() error propagates, nothing is settled.
        failed_job_id = self.recorder.record(job, error, self.connection) if self.recorder is not None else None
        self._settle(job, JobSettlement.FAIL, error, report, failed_job_id=failed_job_id)

    def _settle(
        self,
        job: QueuedJob,
        operation: JobSettlement,
        error: Exception | None,
        report: RenewalReport | None,
        *,
        delay: float = 0,
        failed_job_id: Any = None,
    ) -> None:
        try:
            try:
                if operation is JobSettlement.ACK:
                    self.queue.ack(job)
                elif operation is JobSettlement.RELEASE:
                    self.queue.release(job, delay)
                else:
                    self.queue.fail(job)
            except StaleJobHandleError as stale:
                _contained(
                    logger.warning, 'Job "%s" (attempt %d): %s() was refused as stale; another delivery owns it',
                    job.job_class, job.attempts, operation.value, extra=_describe(job),
                )
                self._send(signals.job_settlement_lost, job, operation=operation, error=stale, exception=error)
                return
            if operation is JobSettlement.ACK:
                _contained(logger.info, 'Job "%s" succeeded (attempt %d)', job.job_class, job.attempts,
                           extra=_describe(job))
                self._send(signals.job_succeeded, job)
            elif operation is JobSettlement.RELEASE:
                self._send(signals.job_released, job, exception=error, delay=delay)
            else:
                self._send(
                    signals.job_failed_permanently, job, exception=error, failed_job_id=failed_job_id,
                    args=_redacted(job),
                )
        finally:
            if report is not None and report.failures:
                _contained(
                    logger.error, 'Job "%s" (attempt %d): %d lease renewal(s) failed; last: %r',
                    job.job_class, job.attempts, report.failures, report.last_error, extra=_describe(job),
                )

    def _send(self, signal_: Any, job: QueuedJob, **kwargs: Any) -> None:
        try:
            responses = signal_.send_robust(type(self.queue), job=job, connection=self.connection, **kwargs)
        except Exception as exc:
            _contained(logger.error, "A %s receiver setup failed: %r", "signal", exc)
            return
        for receiver, response in responses:
            if isinstance(response, BaseException):
                _contained(logger.error, "Signal receiver %r raised %s (contained)", receiver,
                           type(response).__name__, extra=_describe(job))

    def _restore_process_state(self) -> None:
        """Per-job hygiene: nothing a job changed in the process's state reaches the next job."""
        if translation.get_language() != self._language:
            if self._language is None:
                translation.deactivate_all()
            else:
                translation.activate(self._language)
        timezone.deactivate()


def _redacted(job: QueuedJob) -> str:
    try:
        from kinetis_queue.job import resolve_job_class

        return dumps(redacted_args(resolve_job_class(job.job_class), job.args))
    except Exception:
        return dumps(redacted_args(None, job.args))


def _contained(log: Any, message: str, *args: Any, **kwargs: Any) -> None:
    """Log, discarding any error the logging system raises (contract: observers never decide)."""
    try:
        log(message, *args, **kwargs)
    except Exception:  # noqa: S110
        pass


def _reset_connections() -> None:
    """Django's per-request hygiene around a job: no transaction left open, stale connections closed."""
    for db in connections.all(initialized_only=True):
        if db.in_atomic_block:
            _contained(logger.error, "A job left a transaction open on database %r; rolling it back", db.alias)
            _abandon_transaction(db)
        db.close_if_unusable_or_obsolete()


def _abandon_transaction(db: Any) -> None:
    try:
        db.rollback()
    except Exception:
        db.close()
    db.in_atomic_block = False
    db.savepoint_ids = []
    db.atomic_blocks = []
    db.needs_rollback = False
    db.closed_in_transaction = False
    db.commit_on_exit = True
    db.run_on_commit = []
    try:
        db.set_autocommit(db.settings_dict["AUTOCOMMIT"])
    except Exception:
        db.close()
        db.connection = None
