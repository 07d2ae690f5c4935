"""``Worker.run()``'s loop: reserve deliveries in batches, run up to ``concurrency`` at once, stop cleanly.

The main thread is the only one that reserves: it waits for a free slot, flushes the deferred acks
(kinetis_queue.worker.acks), then calls ``Queue.pop_many()`` for the free slots plus an adaptive
prefetch, and hands each delivery to a slot. At concurrency 1 the slot is the main thread itself (so
``--timeout`` keeps its SIGALRM); above, a pool of that many long-lived threads, each with its own
Django connections, cleaned per job as before (kinetis_queue.worker.delivery).

Prefetch: a delivery reserved ahead waits for a slot, so the loop reserves ahead only about as many
deliveries as finished in the last PREFETCH_WINDOW (none while jobs are slow), at most ``prefetch``;
in the pool, a delivery still waiting after PREFETCH_HOLD seconds is given back with
``Queue.unreserve()``. Every held delivery, running or waiting, is renewed by the heartbeat. The
exposure: a worker killed while holding K deliveries charges each of them one attempt (they come back
when their leases expire), and nothing else. Before a redelivery (attempt 2 or more: perhaps a job that
kills its worker) starts, the acks are flushed and the deliveries reserved ahead of a free slot given
back, so a poison pill costs only the jobs running beside it; deliveries that have a free slot start
beside it (giving them back too made a batch of redeliveries start one at a time, each giving back
and taking again the rest).

Stopping (a limit, stop(), the first SIGTERM/SIGINT): reserve no more, give back every waiting
delivery with ``unreserve()`` (same attempt number next time), let every running job finish, flush
the acks, return. Limits count deliveries across the whole process.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

from django.db import connections

from kinetis_queue import crashpoints
from kinetis_queue.contracts import QueuedJob
from kinetis_queue.exceptions import StaleJobHandleError
from kinetis_queue.hooks import PAUSED_WAIT
from kinetis_queue.outcomes import ExitReason
from kinetis_queue.worker.acks import AckBatch
from kinetis_queue.worker.log import contained, describe, job_name, logger
from kinetis_queue.worker.timeout_watchdog import Watchdog
from kinetis_queue.worker.turns import Turns

if TYPE_CHECKING:
    from kinetis_queue.worker import Worker
    from kinetis_queue.worker.delivery import DeliveryRunner
    from kinetis_queue.worker.run_limits import RunLimits

#: Prefetch reserves ahead as many deliveries as finished within this many seconds.
PREFETCH_WINDOW: Final = 0.1
#: In the pool, a prefetched delivery not started within this many seconds is given back.
PREFETCH_HOLD: Final = 1.0
#: How often a main thread waiting for a slot looks at the stop flag and the prefetched deliveries.
SLOT_WAIT: Final = 0.1


class Dispatcher:
    """Runs one ``Worker.run()``: the reserving loop, the slots, and the clean stop."""

    def __init__(self, worker: Worker, runner: DeliveryRunner, concurrency: int, prefetch: int) -> None:
        self.worker = worker
        self.runner = runner
        self.concurrency = concurrency
        self.prefetch = prefetch
        self.acks = AckBatch(worker.queue)
        self._cond = threading.Condition()
        self._waiting: deque[tuple[QueuedJob, float]] = deque()
        self._busy = 0  # slots whose thread runs a job (a timed-out job's thread included)
        self._finished: deque[float] = deque()
        self._error: BaseException | None = None
        self._threads: list[threading.Thread] = []
        self._inbox: deque[QueuedJob | None] = deque()
        self.taken = 0
        #: The weighted turns between the queues (queue_work --queue emails:4,reports:1), or None: strict order.
        self.turns: Turns | None = None
        #: Each queue's concurrent slots in this process (queue_work --queue emails=8,reports=2), or None: the
        #: worker's concurrency shared by every queue. ``_held`` counts each queue's deliveries reserved and not
        #: finished (running, or waiting for a slot).
        self.slots: dict[str, int] | None = None
        self._held: Counter[str] = Counter()

    def busy(self) -> bool:
        """Whether a job is running now (a second signal then exits at once)."""
        with self._cond:
            return self._busy > 0

    # -- the loop ---------------------------------------------------------------------------------

    def run(
        self,
        timeout: float,
        queues: Sequence[str],
        limits: RunLimits,
        turns: Turns | None = None,
        slots: Mapping[str, int] | None = None,
    ) -> ExitReason:
        self.turns = turns
        self.slots = dict(slots) if slots else None
        self.runner.acks = self.acks
        self.runner.watchdog = Watchdog() if self.concurrency > 1 else None
        self.runner.settled = self._settled
        self.runner.failed = self._failed
        try:
            reason = self._loop(timeout, queues, limits)
        finally:
            self._wind_down()
            self.runner.settled = lambda job: None
            self.runner.failed = lambda exc: None
        self._raise_errors()
        return reason

    def _loop(self, timeout: float, queues: Sequence[str], limits: RunLimits) -> ExitReason:
        limits.start()
        while True:
            self._raise_errors()
            if self.worker.stopping:
                return ExitReason.SHUTDOWN
            if not self._wait_for_slot():
                continue
            if self._waiting:
                found = True
            else:
                found = self._reserve(limits.poll_wait(timeout), queues, limits)
                if not found and limits.stop_when_empty and self.busy():
                    self._wait_idle()  # a running job may still release a retry: not empty yet
                    continue
            if self._waiting and not self.worker.stopping:  # a signal during the reservation: give it back
                self._dispatch(self._waiting.popleft()[0])
            reason = limits.reached(found, self.taken, self.worker.stopping)
            if reason is not None:
                return reason

    def _reserve(self, wait: float, queues: Sequence[str], limits: RunLimits) -> bool:
        """Flush the acks, then reserve for the free slots and the prefetch; True when anything came."""
        self.acks.flush()
        self._raise_errors()
        want = max(1, self._free() + self._prefetch_size())
        if limits.once:
            want = 1
        elif limits.max_jobs is not None:
            want = max(1, min(want, limits.max_jobs - self.taken))
        active = self.worker.hooks.active(tuple(queues))
        if not active and queues:  # every queue is paused: look again soon (a resume takes about a second)
            time.sleep(min(wait, PAUSED_WAIT))
            return False
        if len(active) < len(queues):  # some are paused: a short look, so that a resume is seen as soon
            wait = min(wait, PAUSED_WAIT)
        slots = self.slots
        if slots is not None:
            with self._cond:
                free = {name: slots.get(name, 0) - self._held[name] for name in active}
            active = tuple(name for name in active if free[name] > 0)
            if not active:  # every watched queue has all its slots taken: wait for one to end
                with self._cond:
                    self._cond.wait(min(wait, SLOT_WAIT))
                return False
            # Never more than the fullest of them can take: whichever queue the jobs come from, each fits.
            want = min(want, min(free[name] for name in active))
        turns = self.turns
        if turns is not None:
            active = turns.order(active)
            want = min(want, turns.first_share(active))
        reserved = self.worker.queue.pop_many(wait, active, want)
        if turns is not None:
            turns.charge(job.queue for job in reserved.jobs)
        for malformed in reserved.malformed:
            contained(logger.warning, "%s", malformed)
            self.taken += 1
            with self._cond:  # pool threads count their deliveries too
                self.worker.processed += 1
        now = time.monotonic()
        if slots is not None:
            with self._cond:
                self._held.update(job.queue for job in reserved.jobs)
        for job in reserved.jobs:
            if self.runner.heartbeat is not None:
                self.runner.heartbeat.start(job)
            self._waiting.append((job, now))
        return bool(reserved)

    def _prefetch_size(self) -> int:
        if self.prefetch == 0:
            return 0
        with self._cond:
            horizon = time.monotonic() - PREFETCH_WINDOW
            while self._finished and self._finished[0] < horizon:
                self._finished.popleft()
            return min(self.prefetch, len(self._finished))

    def _before_a_redelivery(self) -> None:
        """A redelivery may be a job that ends its worker (a poison pill): before it starts, send the
        deferred acks and give back the deliveries reserved ahead, so that a crash costs only the jobs
        running, not those already done or not yet started. The waiting deliveries that have a free slot
        beside this one start at once (they run beside it), so only those beyond the free slots go back.
        Redeliveries are rare: the hot path pays a comparison."""
        self.acks.flush()
        self._unreserve_waiting(keep=self._free() - 1)

    def _free(self) -> int:
        with self._cond:
            return 1 if self.concurrency == 1 else self.concurrency - self._busy

    # -- the slots --------------------------------------------------------------------------------

    def _dispatch(self, job: QueuedJob) -> None:
        self.taken += 1
        crashpoints.reach("after_pop")  # test-only; off unless KQ_CRASHPOINT names it
        if job.attempts > 1:
            self._before_a_redelivery()
        if self.concurrency == 1:
            with self._cond:
                self._busy += 1
            try:
                self.runner.process(job)
            finally:
                with self._cond:
                    self._busy -= 1
                    self._count_finished()
                    self._unhold(job)
            return
        with self._cond:
            self._busy += 1
            self._inbox.append(job)
            if len(self._threads) < self.concurrency:
                thread = threading.Thread(target=self._slot, name=f"kinetis-queue-job-{len(self._threads) + 1}")
                thread.daemon = True
                self._threads.append(thread)
                thread.start()
            self._cond.notify_all()

    def _slot(self) -> None:
        """One pool thread: runs the deliveries handed to it until told to end."""
        try:
            while True:
                with self._cond:
                    while not self._inbox:
                        self._cond.wait()
                    job = self._inbox.popleft()
                if job is None:
                    return
                try:
                    self.runner.process(job)
                except BaseException as exc:
                    self._failed(exc)
                finally:
                    with self._cond:
                        self._busy -= 1
                        self._count_finished()
                        self._unhold(job)
                        self._cond.notify_all()
        finally:
            connections.close_all()

    def _wait_for_slot(self) -> bool:
        """Wait until a slot is free; False when the worker is stopping instead."""
        with self._cond:
            while self.concurrency > 1 and self._busy >= self.concurrency and not self.worker.stopping:
                if self._error is not None:
                    return True
                self._cond.wait(SLOT_WAIT)
                self._give_back_held()
        return not self.worker.stopping

    def _give_back_held(self) -> None:
        """Unreserve the prefetched deliveries once the oldest waited PREFETCH_HOLD seconds for a slot."""
        if self._waiting and time.monotonic() - self._waiting[0][1] >= PREFETCH_HOLD:
            self._cond.release()
            try:
                self._unreserve_waiting()
            finally:
                self._cond.acquire()

    def _wait_idle(self) -> None:
        with self._cond:
            while self._busy and self._error is None:
                self._cond.wait(SLOT_WAIT)

    def _settled(self, job: QueuedJob) -> None:
        with self._cond:
            self.worker.processed += 1

    def _count_finished(self) -> None:
        """A slot came free (called with ``_cond`` held): counted for the prefetch of the next reservation, which
        waited for that slot. Counted here, not when the delivery's ack is reported (an ack thread may report it
        after that reservation, which then reserved nothing ahead)."""
        if self.prefetch:  # only _prefetch_size() reads (and prunes) it: none kept without prefetch
            self._finished.append(time.monotonic())

    def _unhold(self, job: QueuedJob) -> None:
        """A delivery of a queue with slots ended or was given back (called with ``_cond`` held)."""
        if self.slots is not None and self._held[job.queue] > 0:
            self._held[job.queue] -= 1

    def _failed(self, exc: BaseException) -> None:
        with self._cond:
            if self._error is None:
                self._error = exc
            self._cond.notify_all()

    def _raise_errors(self) -> None:
        self.acks.raise_error()
        with self._cond:
            error, self._error = self._error, None
        if error is not None:
            raise error

    # -- stopping ---------------------------------------------------------------------------------

    def _wind_down(self) -> None:
        """Give back what waits, let what runs finish, flush the acks, end the pool."""
        self._unreserve_waiting()
        with self._cond:
            while self._busy > 0 and not self._only_abandoned_left():
                self._cond.wait(SLOT_WAIT)
            self._inbox.extend([None] * len(self._threads))
            self._cond.notify_all()
        self.acks.close()
        if self.runner.watchdog is not None:
            self.runner.watchdog.close()
        for thread in self._threads:
            thread.join(SLOT_WAIT)
        self.runner.acks = self.runner.watchdog = None

    def _only_abandoned_left(self) -> bool:
        """True when every busy slot runs a job whose --timeout already settled it (left to finish alone)."""
        return self._busy <= self.runner.abandoned()

    def _unreserve_waiting(self, keep: int = 0) -> None:
        """Give back the waiting deliveries but the first ``keep`` (those about to start), oldest first."""
        keep = max(0, keep)
        while len(self._waiting) > keep:
            job, _ = self._waiting[keep]
            del self._waiting[keep]
            with self._cond:
                self._unhold(job)
            if self.runner.heartbeat is not None:
                self.runner.heartbeat.stop(job)
            try:
                self.worker.queue.unreserve(job)
            except StaleJobHandleError:
                contained(
                    logger.warning,
                    'Job "%s" (attempt %d): unreserve() was refused as stale; another delivery owns it',
                    job_name(job),
                    job.attempts,
                    extra=describe(job),
                )
            except Exception as exc:
                contained(
                    logger.error,
                    'Job "%s" (attempt %d) could not be given back (%s); it returns when its lease expires',
                    job_name(job),
                    job.attempts,
                    type(exc).__name__,
                    extra=describe(job),
                )
