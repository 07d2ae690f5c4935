"""The worker: pops one delivery at a time and makes exactly one transition for it.

It follows the contract's "Worker lifecycle" step by step: pop; start the heartbeat on a
RenewableQueue; rebuild the job and run handle() (any exception there is the job's own failure);
stop the heartbeat; settle (recording a final failure first); then report the outcome through
logs and signals, which are observers and can never change it. A job that raises
``kinetis_queue.job.Snooze`` is neither a success nor a failure: it is put back.

The steps around the lifecycle have their own modules: kinetis_queue.hygiene (Django connections
around each job), kinetis_queue.job_timeout (the ``job_timeout`` limit), kinetis_queue.settlement
(the transition and its logs and signals), kinetis_queue.run_limits (when run() stops on its own),
kinetis_queue.outcomes (what run() and each job report).

For production, ``run()`` also stops on limits (``max_jobs``, ``max_time``, ``memory``), on a
restart marker, and ``job_timeout`` bounds each attempt; ``run()`` returns why it stopped.
"""

from __future__ import annotations

import contextvars
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any, Final

from kinetis_queue import crashpoints
from kinetis_queue.contracts import JobSettlement, Queue, QueuedJob, RenewableQueue
from kinetis_queue.exceptions import InvalidQueueArgumentError, MalformedJobSettledError
from kinetis_queue.failed import FailedJobRecorder, ModelRecorder
from kinetis_queue.heartbeat import Heartbeat, RenewalReport
from kinetis_queue.hygiene import HYGIENE_FRESH_FOR, reset_connections
from kinetis_queue.job import JobContext, Snooze, call_handle
from kinetis_queue.job_timeout import call_with_timeout
from kinetis_queue.outcomes import ExitReason, JobOutcome, JobReport
from kinetis_queue.run_limits import RunLimits, positive_limit
from kinetis_queue.serializer import deserialize_job
from kinetis_queue.settlement import Settler, retry_delay, snoozes_of
from kinetis_queue.validation import MAX_RETRY_DELAY, validate_timeout
from kinetis_queue.worker_log import contained, describe, job_name, logger

if TYPE_CHECKING:
    from kinetis_queue.restart import RestartMarker

# Imported from here by the command, the tests and users: the worker's public names.
__all__ = ["MAX_RETRY_DELAY", "ExitReason", "JobOutcome", "JobReport", "Worker", "retry_delay"]

_DEFAULT_RECORDER: Final = ModelRecorder()


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
        job_timeout: float | None = None,
        reporter: Callable[[JobReport], None] | None = None,
    ) -> None:
        if type(default_max_attempts) is not int or default_max_attempts < 0:
            raise InvalidQueueArgumentError("default_max_attempts must be an int of 0 or more")
        if type(retry_base_delay) not in (int, float) or not 0 <= retry_base_delay <= MAX_RETRY_DELAY:
            raise InvalidQueueArgumentError(f"retry_base_delay must be a number of seconds from 0 to {MAX_RETRY_DELAY}")
        positive_limit(job_timeout, "job_timeout")
        self.queue = queue
        #: The connection's name: ``connection``, else the name the queue was built under (None only
        #: for a queue built by hand). Failed-job records and JobContext carry it.
        self.connection = connection if connection is not None else queue.connection
        self.default_max_attempts = default_max_attempts
        self.retry_base_delay = retry_base_delay
        self.recorder = recorder
        #: Hard limit in seconds on one attempt's handle() (``--timeout``); None: no limit.
        self.job_timeout = job_timeout
        #: Called with a JobReport after each settled delivery (the command's per-job line).
        self.reporter = reporter
        #: Why the last run() returned; None before it does.
        self.exit_reason: ExitReason | None = None
        # Contract: the capability is resolved once, in the constructor.
        self._heartbeat = Heartbeat(queue) if isinstance(queue, RenewableQueue) else None
        self._settler = Settler(self)
        self._stopping = threading.Event()
        self._in_job = False
        self._hygiene_due = 0.0
        self.processed = 0

    # -- the loop ---------------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask run() to return once the current process_next() returns."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def run(
        self,
        timeout: float,
        queues: Sequence[str],
        *,
        stop_when_empty: bool = False,
        once: bool = False,
        max_jobs: int | None = None,
        max_time: float | None = None,
        memory: float | None = None,
        restart: RestartMarker | None = None,
    ) -> ExitReason:
        """Process jobs until stopped; return why (also kept in ``exit_reason``).

        Stops on stop() or SIGTERM/SIGINT (between jobs), with ``once`` after one pop, with
        ``stop_when_empty`` at the first empty pop, after ``max_jobs`` deliveries (retries, failures
        and malformed messages count), after ``max_time`` seconds, once resident memory reaches
        ``memory`` MB, or when the ``restart`` marker moved. Limits are read between jobs and never
        interrupt one. An exception escaping the loop sets ``exit_reason`` to ERROR and propagates.
        """
        if validate_timeout(timeout) == 0:
            raise InvalidQueueArgumentError(
                "the poll timeout must be positive in run(): 0 would wait forever and never see a stop"
            )
        limits = RunLimits(
            stop_when_empty=stop_when_empty,
            once=once,
            max_jobs=max_jobs,
            max_time=max_time,
            memory=memory,
            restart=restart,
        )
        self.exit_reason = None
        previous = self._install_signal_handlers()
        try:
            reason = self._loop(timeout, queues, limits)
        except BaseException:
            self.exit_reason = ExitReason.ERROR
            raise
        finally:
            self._restore_signal_handlers(previous)
        self.exit_reason = reason
        return reason

    def _loop(self, timeout: float, queues: Sequence[str], limits: RunLimits) -> ExitReason:
        limits.start()
        first = self.processed
        while True:
            if self.stopping:
                return ExitReason.SHUTDOWN
            found = self.process_next(limits.poll_wait(timeout), queues)
            reason = limits.reached(found, self.processed - first, self.stopping)
            if reason is not None:
                return reason

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
            contained(logger.warning, "%s", exc)
            self.processed += 1
            return True
        if job is None:
            return False
        crashpoints.reach("after_pop")  # test-only; off unless KQ_CRASHPOINT names it
        self._in_job = True
        try:
            self._process(job)
        finally:
            self._in_job = False
        self.processed += 1
        return True

    def _process(self, job: QueuedJob) -> None:
        started = time.perf_counter()
        if time.monotonic() >= self._hygiene_due:
            reset_connections()
        log_context = describe(job)
        ended, report = self._attempt(job, log_context)
        crashpoints.reach("after_handle")
        error = None if isinstance(ended, Snooze) else ended
        if isinstance(ended, Snooze):
            outcome, delay = self._settler.snooze(job, ended, report), ended.delay
        elif ended is None:
            outcome = self._settler.settle(job, JobSettlement.ACK, None, report, log_context=log_context)
            delay = None
        else:
            outcome, delay = self._settler.failure(job, ended, report)
        if self.reporter is not None:
            self._report(job, outcome, time.perf_counter() - started, error, delay)

    def _attempt(
        self, job: QueuedJob, log_context: dict[str, Any]
    ) -> tuple[BaseException | None, RenewalReport | None]:
        """Run one attempt under the heartbeat; what it ended with (None, a Snooze or the job's own
        error) and the heartbeat's report. Connection hygiene follows, before anything is settled."""
        if self._heartbeat is not None:
            self._heartbeat.start(job)
        ended: BaseException | None = None
        try:
            instance = deserialize_job(job.job_class, job.args)
            context = JobContext(
                job.id,
                job.queue,
                job.attempts,
                job.max_attempts,
                self.connection,
                logging.LoggerAdapter(logger, log_context),
                snoozes=snoozes_of(job),
            )
            # Per-job hygiene: handle() runs in a copy of the worker's context, so whatever it
            # activates through context variables (Django's translation and time zone, any
            # asgiref Local) ends with it and never reaches the next job.
            run = contextvars.copy_context().run
            if self.job_timeout is None:
                run(call_handle, instance, context)
            else:
                run(call_with_timeout, instance, context, self.job_timeout)
        except BaseException as exc:
            # Contract: whatever handle() or rebuilding the job raises is the job's own failure (or
            # its Snooze), SystemExit and KeyboardInterrupt included (the worker turns its own SIGINT
            # and SIGTERM into a stop flag); only an operator's Ctrl-C outside run() propagates.
            if _operator_interrupt(exc):
                raise
            ended = exc
        finally:
            report = self._heartbeat.stop() if self._heartbeat is not None else None
            # Before settling: a transaction the job left open is rolled back here, so the
            # settlement's own writes (the FailedJob record above all) are never inside it.
            reset_connections()
            self._hygiene_due = time.monotonic() + HYGIENE_FRESH_FOR
        return ended, report

    def _report(
        self, job: QueuedJob, outcome: JobOutcome, duration: float, error: BaseException | None, delay: float | None
    ) -> None:
        assert self.reporter is not None
        try:
            self.reporter(
                JobReport(
                    job.job_class,
                    job.queue,
                    job.id,
                    job.attempts,
                    outcome,
                    duration,
                    None if error is None else type(error).__name__,
                    delay,
                    job_name(job),
                )
            )
        except Exception as exc:
            contained(logger.error, "The job reporter raised %s (contained)", type(exc).__name__)


def _operator_interrupt(exc: BaseException) -> bool:
    """True for a KeyboardInterrupt that may be the operator's Ctrl-C: raised in the main thread while
    Python's own SIGINT handler is installed (process_next() called outside run()). Under run() the
    worker's handler only sets the stop flag, so a KeyboardInterrupt there is the job's own."""
    return (
        isinstance(exc, KeyboardInterrupt)
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )
