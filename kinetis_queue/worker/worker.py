"""The worker: reserves deliveries and makes exactly one transition for each.

It follows the contract's "Worker lifecycle" step by step: pop; start the heartbeat on a
RenewableQueue; rebuild the job and run handle() (any exception there is the job's own failure);
stop the heartbeat; settle (recording a final failure first); then report the outcome through
logs and signals, which are observers and can never change it. A job that raises
``kinetis_queue.job.Snooze`` is neither a success nor a failure: it is put back.

The steps have their own modules: kinetis_queue.worker.delivery (one delivery from attempt to report),
kinetis_queue.worker.dispatcher (run()'s reserving loop, ``concurrency`` slots, prefetch and the clean
stop), kinetis_queue.worker.acks (deferred acks), kinetis_queue.worker.hygiene (Django connections around
each job), kinetis_queue.worker.job_timeout and kinetis_queue.worker.timeout_watchdog (the ``job_timeout``
limit), kinetis_queue.worker.async_loop (``async def handle``), kinetis_queue.worker.settlement (the transition
and its logs and signals), kinetis_queue.worker.run_limits (when run() stops on its own),
kinetis_queue.outcomes (what run() and each job report).

For production, ``run()`` also stops on limits (``max_jobs``, ``max_time``, ``memory``), on a
restart marker, and ``job_timeout`` bounds each attempt; ``run()`` returns why it stopped.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any, Final, Self

from kinetis_queue import crashpoints
from kinetis_queue.contracts import Queue, RenewableQueue
from kinetis_queue.exceptions import InvalidQueueArgumentError, MalformedJobSettledError
from kinetis_queue.failed import FailedJobRecorder, ModelRecorder
from kinetis_queue.hooks import PAUSED_WAIT, DeliveryHooks
from kinetis_queue.middleware import worker_hooks
from kinetis_queue.outcomes import ExitReason, JobOutcome, JobReport
from kinetis_queue.validation import MAX_RETRY_DELAY, validate_queue_list, validate_timeout
from kinetis_queue.worker.delivery import DeliveryRunner
from kinetis_queue.worker.dispatcher import Dispatcher
from kinetis_queue.worker.heartbeat import Heartbeat
from kinetis_queue.worker.log import contained, logger
from kinetis_queue.worker.run_limits import RunLimits, positive_limit
from kinetis_queue.worker.settlement import retry_delay
from kinetis_queue.worker.turns import Turns

if TYPE_CHECKING:
    from kinetis_queue.worker.restart import RestartMarker

# Imported from here by the command, the tests and users: the worker's public names.
__all__ = ["MAX_RETRY_DELAY", "ExitReason", "JobOutcome", "JobReport", "Worker", "retry_delay"]

_DEFAULT_RECORDER: Final = ModelRecorder()
#: Default cap on deliveries reserved ahead of a free slot (``queue_work --prefetch``).
DEFAULT_PREFETCH: Final = 32


class Worker:
    """Runs jobs from one queue connection (DESIGN.md §4). A context manager: leaving the ``with`` block
    closes it (close())."""

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
        concurrency: int = 1,
        prefetch: int = DEFAULT_PREFETCH,
        hooks: DeliveryHooks | None = None,
    ) -> None:
        if type(default_max_attempts) is not int or default_max_attempts < 0:
            raise InvalidQueueArgumentError("default_max_attempts must be an int of 0 or more")
        if type(retry_base_delay) not in (int, float) or not 0 <= retry_base_delay <= MAX_RETRY_DELAY:
            raise InvalidQueueArgumentError(f"retry_base_delay must be a number of seconds from 0 to {MAX_RETRY_DELAY}")
        if type(concurrency) is not int or concurrency < 1:
            raise InvalidQueueArgumentError("concurrency must be an int of 1 or more")
        if type(prefetch) is not int or prefetch < 0:
            raise InvalidQueueArgumentError("prefetch must be an int of 0 or more")
        positive_limit(job_timeout, "job_timeout")
        self.queue = queue
        #: The connection's name: ``connection``, else the name the queue was built under (None only
        #: for a queue built by hand). Failed-job records and JobContext carry it.
        self.connection = connection if connection is not None else queue.connection
        self.default_max_attempts = default_max_attempts
        self.retry_base_delay = retry_base_delay
        self.recorder = recorder
        #: How many deliveries run() runs at once (threads above 1; ``--concurrency``).
        self.concurrency = concurrency
        #: At most this many deliveries reserved ahead of a free slot by run() (``--prefetch``; 0: none).
        self.prefetch = prefetch
        #: Why the last run() returned; None before it does.
        self.exit_reason: ExitReason | None = None
        #: Pausing, cancellation and workflows around each delivery (kinetis_queue.hooks); the app's by default.
        self.hooks = hooks if hooks is not None else worker_hooks()
        self._hooks_started = False
        # Contract: the capability is resolved once, in the constructor.
        self._heartbeat = Heartbeat(queue) if isinstance(queue, RenewableQueue) else None
        self._runner = DeliveryRunner(self, self._heartbeat, job_timeout=job_timeout, reporter=reporter)
        self._dispatcher: Dispatcher | None = None
        self._stopping = threading.Event()
        self._in_job = False
        self.processed = 0

    @property
    def job_timeout(self) -> float | None:
        """Hard limit in seconds on one attempt's handle() (``--timeout``); None: no limit."""
        return self._runner.job_timeout

    @job_timeout.setter
    def job_timeout(self, seconds: float | None) -> None:
        self._runner.job_timeout = seconds

    @property
    def reporter(self) -> Callable[[JobReport], None] | None:
        """Called with a JobReport after each settled delivery (the command's per-job line)."""
        return self._runner.reporter

    @reporter.setter
    def reporter(self, reporter: Callable[[JobReport], None] | None) -> None:
        self._runner.reporter = reporter

    # -- the loop ---------------------------------------------------------------------------------

    def stop(self) -> None:
        """Ask run() to stop reserving and return once the running jobs end."""
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
        weights: Mapping[str, int] | None = None,
        slots: Mapping[str, int] | None = None,
    ) -> ExitReason:
        """Process jobs until stopped; return why (also kept in ``exit_reason``).

        Stops on stop() or SIGTERM/SIGINT (between jobs), with ``once`` after one pop, with
        ``stop_when_empty`` at the first empty pop while no job runs, after ``max_jobs`` deliveries
        (retries, failures and malformed messages count), after ``max_time`` seconds, once resident
        memory reaches ``memory`` MB, or when the ``restart`` marker moved. Limits count across every
        slot, are read between jobs and never interrupt one. An exception escaping the loop sets
        ``exit_reason`` to ERROR and propagates (after the running jobs end). ``weights`` (queue name to a
        whole number) takes turns between the queues in that proportion while they have work (worker/turns.py);
        without, ``queues`` are asked in their order. ``slots`` (queue name to a whole number, every queue of
        ``queues``) gives each queue its own number of concurrent deliveries, which add up to at most the
        worker's ``concurrency``.
        """
        if slots:
            if set(slots) != set(queues) or any(type(n) is not int or n < 1 for n in slots.values()):
                raise InvalidQueueArgumentError(
                    "slots must give every watched queue a whole number of slots, 1 or more"
                )
            if sum(slots.values()) > self.concurrency:
                raise InvalidQueueArgumentError(
                    f"the queues' slots add up to {sum(slots.values())}, more than the worker's concurrency "
                    f"({self.concurrency})"
                )
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
        # The handlers first: the hooks' start (a heartbeat file, the registry) can take a while, and a
        # SIGTERM meanwhile is a stop like any other, not the process's default death.
        previous = self._install_signal_handlers()
        try:
            self._start_hooks()
            self._dispatcher = Dispatcher(self, self._runner, self.concurrency, self.prefetch)
            turns = Turns(weights) if weights else None
            reason = self._dispatcher.run(timeout, queues, limits, turns, slots)
        except BaseException:
            self.exit_reason = ExitReason.ERROR
            raise
        finally:
            self._restore_signal_handlers(previous)
            self._dispatcher = None
        self.exit_reason = reason
        return reason

    def close(self) -> None:
        """End every thread the worker started (the hooks' background refreshes and the concurrency slots'
        renewals, the heartbeat); call it when done with the worker, after run() or the last process_next()
        (or use the worker as a context manager). Calling it again does nothing more."""
        if self._hooks_started:
            self._hooks_started = False
            self.hooks.stop()
        if self._heartbeat is not None:
            self._heartbeat.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

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
        dispatcher = self._dispatcher
        if self.stopping and (self._in_job or (dispatcher is not None and dispatcher.busy())):
            # A second signal while a job runs: exit now, unsettled; the backend redelivers the job.
            os._exit(128 + signum)
        self.stop()

    # -- one delivery -----------------------------------------------------------------------------

    def _start_hooks(self) -> None:
        if not self._hooks_started:
            self._hooks_started = True
            self.hooks.start(self.queue)

    def process_next(self, timeout: float, queues: Sequence[str]) -> bool:
        """Handle at most one delivery, in this thread, its settlement made before it returns; True
        when something was processed (a malformed message counts). Paused queues are left alone.

        The first call starts the hooks' background refresh (paused queues, cancellations), which runs
        until close(): use the worker in a ``with`` block, or close() it when done (in a test, before
        the test's database goes away)."""
        self._start_hooks()
        active = self.hooks.active(validate_queue_list(queues))
        if not active and queues:
            time.sleep(min(validate_timeout(timeout) or PAUSED_WAIT, PAUSED_WAIT))
            return False
        try:
            job = self.queue.pop(timeout, active)
        except MalformedJobSettledError as exc:
            contained(logger.warning, "%s", exc)
            self.processed += 1
            return True
        if job is None:
            return False
        crashpoints.reach("after_pop")  # test-only; off unless KQ_CRASHPOINT names it
        self._in_job = True
        try:
            self._runner.process(job)
        finally:
            self._in_job = False
        self.processed += 1
        return True
