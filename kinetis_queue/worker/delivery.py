"""One delivery, from the attempt to its one transition and its report (contract: "Worker lifecycle").

Heartbeat held, the job rebuilt and its ``handle()`` run (any exception there is the job's own
failure), the heartbeat stopped for it, Django connections cleaned, then exactly one settlement
and the per-job report. Used by ``Worker.process_next()`` and by every slot of the dispatcher
(kinetis_queue.worker.dispatcher), in the main thread or a pool thread:

- ``--timeout`` in the main thread is SIGALRM (kinetis_queue.worker.job_timeout); in a pool thread it is the
  watchdog's (kinetis_queue.worker.timeout_watchdog): whoever ``Claim.take()``s first settles the delivery.
- an ``async def handle`` runs on the process's event loop (kinetis_queue.worker.async_loop), its time limit
  by cancellation.
- with an AckBatch, a success's ack is deferred and its report made when the batch's result is known.

Every path ends the delivery's hooks once (``DeliveryHooks.ended``): the job's thread after its
settlement, or the watchdog after the timeout's. Their observers (``started``, ``ended``,
``reported``) are contained: what they raise never changes the outcome (kinetis_queue.hooks.Observers).
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from kinetis_queue import crashpoints
from kinetis_queue.contracts import JobSettlement, QueuedJob
from kinetis_queue.exceptions import (
    InvalidQueueArgumentError,
    JobTimeoutError,
    StaleJobHandleError,
    UnknownLockDatabaseError,
)
from kinetis_queue.hooks import Observers
from kinetis_queue.job import Job, JobContext, Snooze, call_handle, handle_arguments
from kinetis_queue.outcomes import STORE_FAILURE_DELAY, AtLimit, JobOutcome, JobReport, SkipDelivery
from kinetis_queue.payload.serializer import deserialize_job
from kinetis_queue.worker.async_loop import run_coroutine
from kinetis_queue.worker.heartbeat import Heartbeat, RenewalReport
from kinetis_queue.worker.hygiene import HYGIENE_FRESH_FOR, reset_connections
from kinetis_queue.worker.job_timeout import attempt_timeout, call_with_timeout
from kinetis_queue.worker.log import contained, describe, job_logger, job_name, logger
from kinetis_queue.worker.settlement import Settler, snoozes_of
from kinetis_queue.worker.timeout_watchdog import Claim, Watchdog

if TYPE_CHECKING:
    from kinetis_queue.worker.acks import AckBatch
    from kinetis_queue.worker.settlement import SettlementPolicy


class DeliveryRunner:
    """Runs deliveries for one worker: any number at once, from any threads."""

    def __init__(
        self,
        policy: SettlementPolicy,
        heartbeat: Heartbeat | None,
        *,
        job_timeout: float | None,
        reporter: Callable[[JobReport], None] | None,
    ) -> None:
        self.policy = policy
        self.heartbeat = heartbeat
        self.settler = Settler(policy)
        self.job_timeout = job_timeout
        self.reporter = reporter
        #: Set by the dispatcher while it runs: deferred acks, the off-main-thread timeout.
        self.acks: AckBatch | None = None
        self.watchdog: Watchdog | None = None
        #: Called once per delivery when its transition is made (or it ended with an error).
        self.settled: Callable[[QueuedJob], None] = lambda job: None
        self.failed: Callable[[BaseException], None] = lambda exc: None
        self._local = threading.local()
        self._observers = Observers()
        self._abandoned = 0
        self._abandoned_lock = threading.Lock()

    def abandoned(self) -> int:
        """How many timed-out jobs, already settled by the watchdog, still run in their threads."""
        with self._abandoned_lock:
            return self._abandoned

    def process(self, job: QueuedJob) -> None:
        """Run ``job``'s attempt and settle it (or leave it to the watchdog that timed it out)."""
        if self.watchdog is None:
            self._process(job)
        else:
            # The watchdog may settle this delivery and end its hooks from its own thread: whatever
            # started() set in this thread's context (the current span, the correlation id) must then
            # end with the attempt here too, not reach the next job this thread runs.
            contextvars.copy_context().run(self._process, job)

    def _process(self, job: QueuedJob) -> None:
        started = time.perf_counter()
        if time.monotonic() >= getattr(self._local, "hygiene_due", 0.0):
            reset_connections()
        log_context = describe(job)
        claim = Claim()
        try:
            ended, report = self._attempt(job, log_context, claim, started)
        except BaseException:  # an operator's Ctrl-C: nothing is settled, but the attempt's hooks end
            if claim.take():
                self._ended(job)
            raise
        if not claim.take():
            with self._abandoned_lock:
                self._abandoned -= 1
            contained(
                logger.warning,
                'Job "%s" (attempt %d) ended after its --timeout had settled it; its result is discarded',
                job_name(job),
                job.attempts,
                extra=log_context,
            )
            return
        crashpoints.reach("after_handle")
        try:
            self.conclude(job, ended, report, log_context, started)
        finally:
            self._ended(job)

    def _ended(self, job: QueuedJob) -> None:
        """The delivery's ``ended()`` hooks, once it is settled (or left unsettled); contained."""
        try:
            self.policy.hooks.ended(job)
        except Exception as exc:
            self._observers.failed(self.policy.hooks.ended, exc)

    def conclude(
        self,
        job: QueuedJob,
        ended: BaseException | None,
        report: RenewalReport | None,
        log_context: dict[str, Any],
        started: float,
    ) -> None:
        """Make the delivery's one transition for how its attempt ``ended``, then report it."""
        try:
            delay = None
            if isinstance(ended, Snooze):
                outcome, delay = self.settler.snooze(job, ended, report), ended.delay
            elif isinstance(ended, SkipDelivery):
                outcome = self.settler.skip(job, ended, report)
            elif isinstance(ended, AtLimit):
                outcome, delay = self.settler.defer(job, ended, report), ended.delay
            elif ended is None:
                self.settler.before_success(job)
                if self.acks is not None:
                    self.acks.add(job, lambda stale: self._acked(job, stale, report, log_context, started))
                    return
                outcome = self.settler.settle(job, JobSettlement.ACK, None, report, log_context=log_context)
            else:
                outcome, delay = self.settler.failure(job, ended, report)
        except BaseException:
            self.settled(job)
            raise
        self.settled(job)
        error = None if isinstance(ended, (Snooze, SkipDelivery, AtLimit)) else ended
        self.report(job, outcome, time.perf_counter() - started, error, delay)

    def _acked(
        self,
        job: QueuedJob,
        stale: StaleJobHandleError | None,
        report: RenewalReport | None,
        log_context: dict[str, Any],
        started: float,
    ) -> None:
        outcome = self.settler.acked(job, stale, report, log_context)
        self.settled(job)
        self.report(job, outcome, time.perf_counter() - started, None, None)

    def _attempt(
        self, job: QueuedJob, log_context: dict[str, Any], claim: Claim, started: float
    ) -> tuple[BaseException | None, RenewalReport | None]:
        """Run one attempt under the heartbeat; what it ended with (None, a Snooze or the job's own
        error) and the heartbeat's report. Connection hygiene follows, before anything is settled."""
        if self.heartbeat is not None:
            self.heartbeat.start(job)
        ended: BaseException | None = None
        token: int | None = None
        claimed = False
        try:
            instance = deserialize_job(job.job_class, job.args)
            self._admit(job, instance)
            claimed = True
            context = JobContext(
                job.id,
                job.queue,
                job.attempts,
                job.max_attempts,
                self.policy.connection,
                logging.LoggerAdapter(job_logger, log_context),
                snoozes=snoozes_of(job),
                cancel_check=partial(self.policy.hooks.cancelled, job),
            )
            seconds = attempt_timeout(job.metadata, self.job_timeout)
            if self._needs_watchdog(instance, seconds):
                assert seconds is not None
                token = self._arm(job, claim, log_context, started, seconds)
            try:
                self.policy.hooks.started(job)
            except Exception as exc:  # an observer: never the job's failure
                self._observers.failed(self.policy.hooks.started, exc)
            # Per-job hygiene: handle() runs in a copy of the worker's context, so whatever it
            # activates through context variables (Django's translation and time zone, any
            # asgiref Local) ends with it and never reaches the next job.
            contextvars.copy_context().run(self._call, instance, context, token is not None, seconds)
        except BaseException as exc:
            # Contract: whatever handle() or rebuilding the job raises is the job's own failure (or
            # its Snooze), SystemExit and KeyboardInterrupt included (the worker turns its own SIGINT
            # and SIGTERM into a stop flag); only an operator's Ctrl-C outside run() propagates.
            if _operator_interrupt(exc):
                raise
            ended = exc
        finally:
            if token is not None and self.watchdog is not None:
                self.watchdog.disarm(token)
            report = self.heartbeat.stop(job) if self.heartbeat is not None else None
            # Before settling: a transaction the job left open is rolled back here, so the
            # settlement's own writes (the FailedJob record above all) are never inside it.
            reset_connections()
            self._local.hygiene_due = time.monotonic() + HYGIENE_FRESH_FOR
            if claimed:  # after the reset: a slot row is never written inside the job's transaction
                self.policy.hooks.unclaim(job)
        return ended, report

    def _admit(self, job: QueuedJob, instance: Job) -> None:
        """Before the attempt, the hooks' admit() (paused queues, cancellation, workflows), then their claim() (a
        concurrency slot, kinetis_queue.limits; a unique job's start, kinetis_queue.unique). Raises SkipDelivery
        (acked unrun) or AtLimit (given back unstarted, no attempt charged), also when a store could not be
        reached; what claim() took is given back by unclaim() after the attempt, or at once when one refused."""
        hooks = self.policy.hooks
        hooks.admit(job)
        try:
            hooks.claim(job, instance)
        except (AtLimit, SkipDelivery, InvalidQueueArgumentError, UnknownLockDatabaseError):
            # A key callable that failed (InvalidQueueArgumentError) and a lock in a database the worker's
            # settings do not give the connection (UnknownLockDatabaseError) are the job's own failures.
            raise
        except Exception as exc:
            raise AtLimit(
                STORE_FAILURE_DELAY,
                f"the store of its concurrency slots or unique lock failed ({type(exc).__name__}: {exc})",
                unexpected=True,
            ) from exc

    def _needs_watchdog(self, instance: Any, seconds: float | None) -> bool:
        """A sync job with a time limit, off the main thread: SIGALRM cannot reach it."""
        return (
            seconds is not None
            and self.watchdog is not None
            and threading.current_thread() is not threading.main_thread()
            and not inspect.iscoroutinefunction(type(instance).handle)
        )

    def _call(self, instance: Any, context: JobContext, watched: bool, seconds: float | None) -> None:
        """handle() under this attempt's limit of ``seconds``: cancellation (async), SIGALRM (main thread),
        the watchdog already armed (``watched``), or none."""
        if inspect.iscoroutinefunction(type(instance).handle):
            run_coroutine(instance.handle(**handle_arguments(instance, context)), seconds)
        elif seconds is None or watched:
            call_handle(instance, context)
        else:
            call_with_timeout(instance, context, seconds)

    def _arm(self, job: QueuedJob, claim: Claim, log_context: dict[str, Any], started: float, seconds: float) -> int:
        assert self.watchdog is not None

        def expired() -> None:
            if not claim.take():
                return
            with self._abandoned_lock:
                self._abandoned += 1
            report = self.heartbeat.stop(job) if self.heartbeat is not None else None
            try:
                self.conclude(job, JobTimeoutError(seconds), report, log_context, started)
            except BaseException as exc:
                self.failed(exc)
            finally:
                self._ended(job)  # settled here: the span ends, the worker registry drops the job
                reset_connections()

        return self.watchdog.arm(seconds, expired)

    def report(
        self, job: QueuedJob, outcome: JobOutcome, duration: float, error: BaseException | None, delay: float | None
    ) -> None:
        """Hand the delivery's JobReport to the reporter (the command's per-job line) and to the hooks that
        want it (metrics, the worker registry); contained."""
        hooks = self.policy.hooks
        if self.reporter is None and not hooks.wants_reports:
            return
        report = JobReport(
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
        if hooks.wants_reports:
            try:
                hooks.reported(job, report)
            except Exception as exc:
                self._observers.failed(hooks.reported, exc)
        if self.reporter is not None:
            try:
                self.reporter(report)
            except Exception as exc:
                contained(logger.error, "The job reporter raised %s (contained)", type(exc).__name__)


def _operator_interrupt(exc: BaseException) -> bool:
    """True for a KeyboardInterrupt that may be the operator's Ctrl-C: raised in the main thread while
    Python's own SIGINT handler is installed (process_next() called outside run()). Under run() the
    worker's handler only sets the stop flag, so a KeyboardInterrupt there is the job's own."""
    import signal

    return (
        isinstance(exc, KeyboardInterrupt)
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )
