"""What the Django glue plugs into a worker around each delivery: paused queues, cancellation, workflows.

The worker knows only this interface; the implementations live above it, each a middleware of
KINETIS_QUEUE["MIDDLEWARE"] (kinetis_queue.middleware: kinetis_queue/control for pausing and cancellation,
kinetis_queue/workflows for chains and batches, kinetis_queue/observability), and every Worker given no
hooks builds the chain's. Every method is on the delivery's path, so
each must answer from memory for a job that is none of its business (a set lookup, a metadata key).

The calls, in a delivery's order: ``active()`` filters the queues a reservation pops; ``admit()``
decides, before the attempt, whether it runs (raising SkipDelivery or AtLimit when not); ``claim()``, the
job rebuilt, takes what the attempt needs (a concurrency slot, a unique job's start) and ``unclaim()`` gives
it back once the attempt is over, before its settlement; ``skipped()`` runs before the ack of a delivery
acked unrun;
``succeeding()`` / ``failing()`` run just before the ack of a success / the fail() of a final failure
(an error there propagates and nothing is settled, as a failed-job record's); ``ended()`` after the
attempt, whatever it became, on every path (by the watchdog that settled a timed-out attempt, too).
``cancelled()`` answers JobContext.cancelled.

``started()``, ``ended()`` and ``reported()`` only observe (telemetry, the worker registry): what one of
them raises is logged once (per hook, method and error class, for the worker's life) and contained, so
observability never changes a delivery's outcome (``Observers``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

from kinetis_queue.outcomes import SkipDelivery as SkipDelivery  # re-exported: its home is outcomes

if TYPE_CHECKING:
    from kinetis_queue.contracts import Queue, QueuedJob
    from kinetis_queue.job import Job
    from kinetis_queue.outcomes import JobReport


#: How long a worker whose every watched queue is paused waits before it looks again (seconds).
PAUSED_WAIT: Final = 0.5

logger = logging.getLogger("kinetis_queue.worker")


class DeliveryHooks:
    """Behaviour around deliveries; this base does nothing (every method is an optional hook)."""

    #: Whether ``reported()`` wants every delivery's JobReport (building one costs the worker a little).
    wants_reports: bool = False

    def start(self, queue: Queue) -> None:
        """The worker's run begins on ``queue`` (start background refreshes here)."""

    def stop(self) -> None:
        """The worker's run ended."""

    def active(self, queues: tuple[str, ...]) -> tuple[str, ...]:
        """The queues of ``queues`` a reservation may pop now (the paused ones left out), in order."""
        return queues

    def admit(self, job: QueuedJob) -> None:
        """Before the attempt: raise SkipDelivery (or limits.AtLimit) when it must not run now."""

    def claim(self, job: QueuedJob, instance: Job) -> None:
        """After admit(), the job rebuilt: take what its attempt needs; raise AtLimit or SkipDelivery when it must
        not run now. Each hook whose claim() returned gets its unclaim() once the attempt is over (at once
        when a later hook's claim() raised)."""

    def unclaim(self, job: QueuedJob) -> None:
        """The attempt is over (or did not start), before its settlement: give back what claim() took."""

    def skipped(self, job: QueuedJob, skipped: SkipDelivery) -> None:
        """Just before the ack of a delivery that is skipped, unrun (cancelled, superseded, its model gone)."""

    def cancelled(self, job: QueuedJob) -> bool:
        """Whether the job was cancelled (JobContext.cancelled)."""
        return False

    def started(self, job: QueuedJob) -> None:
        """The attempt was admitted and its handle() is about to run."""

    def succeeding(self, job: QueuedJob) -> None:
        """Just before the ack of a successful attempt."""

    def failing(self, job: QueuedJob) -> None:
        """Just before the fail() of an attempt that failed for good."""

    def ended(self, job: QueuedJob) -> None:
        """The attempt ended, whatever it became (skipped and deferred ones included)."""

    def reported(self, job: QueuedJob, report: JobReport) -> None:
        """What the delivery became (only when ``wants_reports``): its outcome, duration and error class."""


class Observers:
    """Where the failures of observer hooks (started, ended, reported) go: each is logged once per hook,
    method and error class (a hook failing on every job says so once, not once a job), never raised."""

    def __init__(self) -> None:
        self._logged: set[tuple[str, str, str]] = set()
        self._lock = threading.Lock()

    def failed(self, method: Callable[..., None], exc: Exception) -> None:
        """``method`` (a bound hook method) raised ``exc``: log it the first time, then contain it.
        The error's class only: its text could quote a job's values."""
        owner = getattr(method, "__self__", None)
        hook = type(owner).__qualname__ if owner is not None else getattr(method, "__qualname__", "?")
        name = getattr(method, "__name__", "?")
        key = (hook, name, type(exc).__name__)
        with self._lock:
            if key in self._logged:
                return
            self._logged.add(key)
        try:
            logger.error(
                "The %s hook's %s() raised %s; contained, the job's outcome is unchanged (logged once for this worker)",
                hook,
                name,
                type(exc).__name__,
            )
        except Exception:  # noqa: S110 - observers never decide, the logging system's own errors included
            pass


class HookChain(DeliveryHooks):
    """Several hooks, each asked in turn: for each method, only those that override it (the base's
    no-ops cost a delivery nothing)."""

    hooks: tuple[DeliveryHooks, ...]

    def __init__(self, hooks: Sequence[DeliveryHooks]) -> None:
        # A chain in a chain is flattened: one loop per call, whatever the nesting.
        self.hooks = tuple(
            inner for hook in hooks for inner in (hook.hooks if isinstance(hook, HookChain) else (hook,))
        )
        self.wants_reports = any(hook.wants_reports for hook in self.hooks)
        #: An observer hook that raises is logged and skipped; the others are still called.
        self.observers = Observers()

        def overriding(name: str) -> tuple[Any, ...]:
            base = getattr(DeliveryHooks, name)
            return tuple(getattr(hook, name) for hook in self.hooks if getattr(type(hook), name) is not base)

        self._start = overriding("start")
        self._stop = overriding("stop")
        self._active = overriding("active")
        self._admit = overriding("admit")
        #: The hooks that claim, each with whether it overrides unclaim() (the one called after its claim()).
        self._claiming = tuple(
            (hook, type(hook).unclaim is not DeliveryHooks.unclaim)
            for hook in self.hooks
            if type(hook).claim is not DeliveryHooks.claim
        )
        self._unclaiming = tuple(hook for hook, gives_back in reversed(self._claiming) if gives_back)
        self._skipped = overriding("skipped")
        self._cancelled = overriding("cancelled")
        self._started = overriding("started")
        self._succeeding = overriding("succeeding")
        self._failing = overriding("failing")
        self._ended = overriding("ended")
        self._reported = tuple(hook.reported for hook in self.hooks if hook.wants_reports)

    def start(self, queue: Queue) -> None:
        for start in self._start:
            start(queue)

    def stop(self) -> None:
        for stop in self._stop:
            stop()

    def active(self, queues: tuple[str, ...]) -> tuple[str, ...]:
        for active in self._active:
            queues = active(queues)
        return queues

    def admit(self, job: QueuedJob) -> None:
        for admit in self._admit:
            admit(job)

    def claim(self, job: QueuedJob, instance: Job) -> None:
        done = 0
        try:
            for hook, _ in self._claiming:
                hook.claim(job, instance)
                done += 1
        except BaseException:
            for hook, gives_back in reversed(self._claiming[:done]):
                if gives_back:
                    self._unclaim(hook, job)
            raise

    def unclaim(self, job: QueuedJob) -> None:
        for hook in self._unclaiming:
            self._unclaim(hook, job)

    def _unclaim(self, hook: DeliveryHooks, job: QueuedJob) -> None:
        """One hook's unclaim(): what it raises is logged (once) and contained, as what it gives back frees
        itself (a slot's lease ends) and the delivery must still be settled."""
        try:
            hook.unclaim(job)
        except Exception as exc:
            self.observers.failed(hook.unclaim, exc)

    def skipped(self, job: QueuedJob, skipped: SkipDelivery) -> None:
        for each in self._skipped:
            each(job, skipped)

    def cancelled(self, job: QueuedJob) -> bool:
        return any(cancelled(job) for cancelled in self._cancelled)

    def succeeding(self, job: QueuedJob) -> None:
        for succeeding in self._succeeding:
            succeeding(job)

    def failing(self, job: QueuedJob) -> None:
        for failing in self._failing:
            failing(job)

    def started(self, job: QueuedJob) -> None:
        for started in self._started:
            try:
                started(job)
            except Exception as exc:
                self.observers.failed(started, exc)

    def ended(self, job: QueuedJob) -> None:
        for ended in self._ended:
            try:
                ended(job)
            except Exception as exc:
                self.observers.failed(ended, exc)

    def reported(self, job: QueuedJob, report: JobReport) -> None:
        for reported in self._reported:
            try:
                reported(job, report)
            except Exception as exc:
                self.observers.failed(reported, exc)
