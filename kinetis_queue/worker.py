"""The worker: pops one delivery at a time and makes exactly one transition for it.

It follows the contract's "Worker lifecycle" step by step: pop; start the heartbeat on a
RenewableQueue; rebuild the job and run handle() (any exception there is the job's own failure);
stop the heartbeat; settle (recording a final failure first); then report the outcome through
logs and signals, which are observers and can never change it. A job that raises
``kinetis_queue.job.Snooze`` is neither a success nor a failure: it is put back (``_snooze``).

For production, ``run()`` also stops on limits (``max_jobs``, ``max_time``, ``memory``), on a
restart marker, and ``job_timeout`` bounds each attempt; ``run()`` returns why it stopped.
"""

from __future__ import annotations

import contextvars
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import FrameType
from typing import TYPE_CHECKING, Any, Final

from django.db import connections

from kinetis_queue import crashpoints, signals
from kinetis_queue.contracts import JobSettlement, Queue, QueuedJob, RenewableQueue
from kinetis_queue.envelope import Envelope
from kinetis_queue.exceptions import (
    InvalidQueueArgumentError,
    JobTimeoutError,
    JobTimeoutInterrupt,
    MalformedJobSettledError,
    StaleJobHandleError,
)
from kinetis_queue.failed import (
    MAX_RECORDED_TEXT,
    FailedJobRecorder,
    ModelRecorder,
    exception_text,
    storable,
)
from kinetis_queue.heartbeat import Heartbeat, RenewalReport
from kinetis_queue.job import JobContext, Snooze, call_handle, display_name
from kinetis_queue.redaction import display_json, for_observers, scrub_for
from kinetis_queue.serializer import deserialize_job
from kinetis_queue.validation import validate_timeout

if TYPE_CHECKING:
    from kinetis_queue.restart import RestartMarker

logger = logging.getLogger("kinetis_queue.worker")

#: The retry delay's ceiling: worker policy, not a backend limit.
MAX_RETRY_DELAY: Final = 900
#: The doubling stops here so a high attempt count cannot overflow.
MAX_RETRY_EXPONENT: Final = 10

#: While busy, the restart marker is read at most this often (seconds); an idle worker reads it
#: after every empty poll. (The memory limit is read after every delivery: a /proc read, no I/O.)
CONTROL_CHECK_INTERVAL: Final = 1.0
#: A job starting within this many seconds of the previous job's connection hygiene skips its
#: own opening pass: in between, only time can make a connection obsolete (CONN_MAX_AGE), and
#: Django's own request cycle is as loose. After an idle poll the pass runs again.
HYGIENE_FRESH_FOR: Final = 1.0
#: SIGALRM interrupts a running handle() for job_timeout (POSIX, main thread only).
_CAN_INTERRUPT: Final = hasattr(signal, "setitimer") and hasattr(signal, "SIGALRM")

_DEFAULT_RECORDER: Final = ModelRecorder()


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


@dataclass(frozen=True, slots=True)
class JobReport:
    """One processed delivery, for a per-job output line: never the job's arguments."""

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


def resident_memory_mb() -> float:
    """This process's resident memory in MB (Linux: current; elsewhere: the peak, all it can tell)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 1_048_576
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 1_048_576 if sys.platform == "darwin" else peak / 1024


def _positive_limit(value: object, what: str) -> None:
    if value is not None and (type(value) not in (int, float) or not 0 < value < float("inf")):  # type: ignore[operator]
        raise InvalidQueueArgumentError(f"{what} must be None or a positive number")


def retry_delay(attempt: int, base: float) -> float:
    """Seconds before the next attempt after ``attempt`` failed: min(900, base * 2 ** min(attempt - 1, 10))."""
    return float(min(MAX_RETRY_DELAY, base * 2 ** min(max(attempt, 1) - 1, MAX_RETRY_EXPONENT)))


def attempt_of(attempt: int, cap: int) -> str:
    """"attempt 2 of 3" for a log line, worded so that a cap of 0 never reads "attempt 1 of 0"."""
    if cap == 0:
        return f"attempt {attempt}; no retries: max attempts is 0"
    if attempt > cap:
        return f"attempt {attempt}, past the cap of {cap}"
    return f"attempt {attempt} of {cap}"


def _name(job: QueuedJob) -> str:
    """What lines about ``job`` call it: the task or receiver it carries, else its class path."""
    return display_name(job.job_class, job.args)


def _describe(job: QueuedJob) -> dict[str, Any]:
    """The job's log context: what every log record about it carries (never its arguments)."""
    return {"job_class": job.job_class, "job_name": _name(job), "queue": job.queue, "job_id": job.id,
            "attempt": job.attempts}


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
            raise InvalidQueueArgumentError("retry_base_delay must be a number of seconds from 0 to 900")
        _positive_limit(job_timeout, "job_timeout")
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
        self._stopping = threading.Event()
        self._in_job = False
        self._alarm_armed = False
        self._deadline_passed = False
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
        if max_jobs is not None and (type(max_jobs) is not int or max_jobs < 1):
            raise InvalidQueueArgumentError("max_jobs must be None or a positive int")
        _positive_limit(max_time, "max_time")
        _positive_limit(memory, "memory")
        self.exit_reason = None
        previous = self._install_signal_handlers()
        try:
            reason = self._loop(timeout, queues, stop_when_empty, once, max_jobs, max_time, memory, restart)
        except BaseException:
            self.exit_reason = ExitReason.ERROR
            raise
        finally:
            self._restore_signal_handlers(previous)
        self.exit_reason = reason
        return reason

    def _loop(
        self,
        timeout: float,
        queues: Sequence[str],
        stop_when_empty: bool,
        once: bool,
        max_jobs: int | None,
        max_time: float | None,
        memory: float | None,
        restart: RestartMarker | None,
    ) -> ExitReason:
        generation = restart.read() if restart is not None else None
        started = time.monotonic()
        deadline = None if max_time is None else started + max_time
        next_check = started + CONTROL_CHECK_INTERVAL
        first = self.processed
        while True:
            if self.stopping:
                return ExitReason.SHUTDOWN
            wait = timeout
            if deadline is not None:
                # An idle worker does not outstay max_time by a whole poll.
                wait = min(wait, max(deadline - time.monotonic(), 0.001))
            found = self.process_next(wait, queues)
            if once:
                return ExitReason.COMPLETED if found else ExitReason.EMPTY
            if max_jobs is not None and self.processed - first >= max_jobs:
                return ExitReason.MAX_JOBS
            if not found and stop_when_empty:
                return ExitReason.EMPTY
            if self.stopping:
                return ExitReason.SHUTDOWN
            if deadline is not None and time.monotonic() >= deadline:
                return ExitReason.MAX_TIME
            if memory is not None and resident_memory_mb() >= memory:
                return ExitReason.MEMORY
            if restart is None:
                continue
            now = time.monotonic()
            if found and now < next_check:
                continue  # a busy worker reads the marker at most once per CONTROL_CHECK_INTERVAL
            next_check = now + CONTROL_CHECK_INTERVAL
            if restart.read() != generation:
                return ExitReason.RESTART

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
            _reset_connections()
        log_context = _describe(job)
        job_log = logging.LoggerAdapter(logger, log_context)
        if self._heartbeat is not None:
            self._heartbeat.start(job)
        error: BaseException | None = None
        snoozed: Snooze | None = None
        try:
            instance = deserialize_job(job.job_class, job.args)
            context = JobContext(job.id, job.queue, job.attempts, job.max_attempts, self.connection, job_log,
                                 snoozes=snoozes_of(job))
            # Per-job hygiene: handle() runs in a copy of the worker's context, so whatever it
            # activates through context variables (Django's translation and time zone, any
            # asgiref Local) ends with it and never reaches the next job.
            run = contextvars.copy_context().run
            if self.job_timeout is None:
                run(call_handle, instance, context)
            else:
                run(self._call_with_timeout, instance, context, self.job_timeout)
        except Snooze as snooze:
            snoozed = snooze
        except BaseException as exc:
            # Contract: whatever handle() or rebuilding the job raises is the job's own failure,
            # SystemExit and KeyboardInterrupt included (the worker turns its own SIGINT and SIGTERM
            # into a stop flag); only an operator's Ctrl-C outside run() propagates.
            if _operator_interrupt(exc):
                raise
            error = exc
        finally:
            report = self._heartbeat.stop() if self._heartbeat is not None else None
            # Before settling: a transaction the job left open is rolled back here, so the
            # settlement's own writes (the FailedJob record above all) are never inside it.
            _reset_connections()
            self._hygiene_due = time.monotonic() + HYGIENE_FRESH_FOR
        crashpoints.reach("after_handle")
        if snoozed is not None:
            outcome, delay = self._snooze(job, snoozed, report), snoozed.delay
        elif error is None:
            outcome = self._settle(job, JobSettlement.ACK, None, report, log_context=log_context)
            delay = None
        else:
            outcome, delay = self._settle_failure(job, error, report)
        if self.reporter is not None:
            self._report(job, outcome, time.perf_counter() - started, error, delay)

    def _call_with_timeout(self, instance: Any, context: JobContext, seconds: float) -> None:
        """call_handle() under a hard limit: SIGALRM raises JobTimeoutInterrupt inside handle().

        The interrupt lands between two Python bytecodes, so it stops Python code in a loop and
        any blocking call that returns to Python on a signal (sleeps, socket and database waits);
        a long C call that does not (a huge regex, some extension code) is interrupted only when it
        returns. Outside the main thread, or without SIGALRM, the limit is checked after handle()
        returns instead. Either way the attempt fails with JobTimeoutError.
        """
        if not _CAN_INTERRUPT or threading.current_thread() is not threading.main_thread():
            began = time.monotonic()
            call_handle(instance, context)
            if time.monotonic() - began > seconds:
                raise JobTimeoutError(seconds)
            return
        previous = signal.signal(signal.SIGALRM, self._on_alarm)
        self._deadline_passed = False
        try:
            self._alarm_armed = True
            try:
                signal.setitimer(signal.ITIMER_REAL, seconds)
                call_handle(instance, context)
            finally:
                # The alarm is one-shot and the handler disarms itself before raising, so the
                # interrupt is raised at most once, and only inside this try.
                self._alarm_armed = False
                signal.setitimer(signal.ITIMER_REAL, 0)
        except JobTimeoutInterrupt:
            raise JobTimeoutError(seconds) from None
        finally:
            signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)
        if self._deadline_passed:
            # handle() caught the interrupt and returned anyway: the attempt still ran too long.
            raise JobTimeoutError(seconds)

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        if self._alarm_armed:
            self._alarm_armed = False
            self._deadline_passed = True
            raise JobTimeoutInterrupt()

    def _report(
        self, job: QueuedJob, outcome: JobOutcome, duration: float, error: BaseException | None, delay: float | None
    ) -> None:
        assert self.reporter is not None
        try:
            self.reporter(
                JobReport(job.job_class, job.queue, job.id, job.attempts, outcome, duration,
                          None if error is None else type(error).__name__, delay, _name(job))
            )
        except Exception as exc:
            _contained(logger.error, "The job reporter raised %s (contained)", type(exc).__name__)

    def _snooze(self, job: QueuedJob, snooze: Snooze, report: RenewalReport | None) -> JobOutcome:
        """Store the delivery's replacement (same id, attempts over, one more snooze), then ack it.

        The order is RabbitMQ's own release (publish, then settle): a crash in between leaves two
        copies, never none. A failing push propagates with this delivery unsettled (redelivered).
        """
        metadata = {**job.metadata, SNOOZES_KEY: snoozes_of(job) + 1}
        replacement = Envelope(job.id, time.time(), job.job_class, job.args, 0, job.max_attempts, metadata)
        try:
            self.queue._push(replacement, snooze.delay, job.queue)
            try:
                self.queue.ack(job)
            except StaleJobHandleError as stale:
                _contained(
                    logger.warning, 'Job "%s" (attempt %d): ack() after its snooze was refused as stale; another '
                    "delivery owns it", _name(job), job.attempts, extra=_describe(job),
                )
                self._send(signals.job_settlement_lost, job, operation=JobSettlement.ACK, error=stale, exception=None)
                return JobOutcome.LOST
            _contained(logger.info, 'Job "%s" snoozed (attempt %d), back in %gs: %s', _name(job), job.attempts,
                       snooze.delay, snooze.reason, extra=_describe(job))
            self._send(signals.job_released, job, exception=snooze, delay=snooze.delay)
            return JobOutcome.SNOOZED
        finally:
            if report is not None and report.failures:
                _contained(
                    logger.error, 'Job "%s" (attempt %d): %d lease renewal(s) failed; last: %r',
                    _name(job), job.attempts, report.failures, report.last_error, extra=_describe(job),
                )

    def _settle_failure(
        self, job: QueuedJob, error: BaseException, report: RenewalReport | None
    ) -> tuple[JobOutcome, float | None]:
        cap = job.max_attempts if job.max_attempts is not None else self.default_max_attempts
        message = _scrubbed_message(job, error)
        if job.attempts < cap:
            delay = retry_delay(job.attempts, self.retry_base_delay)
            _contained(
                logger.warning, 'Job "%s" failed (attempt %d), retrying in %gs: %s: %s',
                _name(job), job.attempts, delay, type(error).__name__, message, extra=_describe(job),
            )
            return self._settle(job, JobSettlement.RELEASE, error, report, delay=delay), delay
        _contained(
            logger.error, 'Job "%s" failed permanently (%s): %s: %s; arguments: %s',
            _name(job), attempt_of(job.attempts, cap), type(error).__name__, message,
            display_json(job.job_class, job.args),
            extra=_describe(job),
        )
        # Contract, "Recording a job before fail()": a record() error propagates, nothing is settled.
        failed_job_id = self.recorder.record(job, error, self.connection) if self.recorder is not None else None
        crashpoints.reach("after_record")
        return self._settle(job, JobSettlement.FAIL, error, report, failed_job_id=failed_job_id), None

    def _settle(
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
                    _name(job), job.attempts, operation.value, extra=_describe(job),
                )
                self._send(signals.job_settlement_lost, job, operation=operation, error=stale, exception=error)
                return JobOutcome.LOST
            if operation is JobSettlement.ACK:
                _contained(logger.info, 'Job "%s" succeeded (attempt %d)', _name(job), job.attempts,
                           extra=log_context or _describe(job))
                self._send(signals.job_succeeded, job)
                return JobOutcome.SUCCEEDED
            if operation is JobSettlement.RELEASE:
                self._send(signals.job_released, job, exception=error, delay=delay)
                return JobOutcome.RELEASED
            self._send(
                signals.job_failed_permanently, job, exception=error, failed_job_id=failed_job_id,
                args=display_json(job.job_class, job.args),
            )
            return JobOutcome.FAILED
        finally:
            if report is not None and report.failures:
                _contained(
                    logger.error, 'Job "%s" (attempt %d): %d lease renewal(s) failed; last: %r',
                    _name(job), job.attempts, report.failures, report.last_error, extra=_describe(job),
                )

    def _send(self, signal_: Any, job: QueuedJob, **kwargs: Any) -> None:
        if not signal_.receivers:
            return
        try:
            # Receivers see the job as redaction allows; the delivery is settled by the time they run.
            responses = signal_.send_robust(
                type(self.queue), job=for_observers(job), connection=self.connection, **kwargs
            )
        except Exception as exc:
            _contained(logger.error, "A %s receiver setup failed: %r", "signal", exc)
            return
        for receiver, response in responses:
            if isinstance(response, BaseException):
                _contained(logger.error, "Signal receiver %r raised %s (contained)", receiver,
                           type(response).__name__, extra=_describe(job))


#: The metadata key counting a job's snoozes (kinetis_queue.job.Snooze); absent on a plain push.
SNOOZES_KEY: Final = "kinetis_queue.snoozes"


def snoozes_of(job: QueuedJob) -> int:
    """How many times ``job`` was snoozed before this delivery (0 when its metadata does not say)."""
    value = job.metadata.get(SNOOZES_KEY, 0)
    return value if type(value) is int and value >= 0 else 0


def _operator_interrupt(exc: BaseException) -> bool:
    """True for a KeyboardInterrupt that may be the operator's Ctrl-C: raised in the main thread while
    Python's own SIGINT handler is installed (process_next() called outside run()). Under run() the
    worker's handler only sets the stop flag, so a KeyboardInterrupt there is the job's own."""
    return (
        isinstance(exc, KeyboardInterrupt)
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )


def _scrubbed_message(job: QueuedJob, error: BaseException) -> str:
    """The exception's message with any Sensitive argument's value replaced, escaped and cut as a
    failed-job record stores it (a lone surrogate would break a UTF-8 log stream)."""
    try:
        return storable(scrub_for(job.job_class, job.args, exception_text(error)), MAX_RECORDED_TEXT, lines=True)
    except BaseException:  # a job's __str__ may raise anything; it never stops the worker
        return "(message unavailable)"


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
