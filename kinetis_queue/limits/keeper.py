"""The worker's side of concurrency limits: take a delivery's slot, keep it renewed, give it back.

One ``SlotKeeper`` per worker, built on the first delivery of a limited class (no thread otherwise).
A slot is leased for ``slot_lease_of(queue)`` (the connection's visibility timeout, RabbitMQ's SLOT_LEASE)
and renewed every third of it from one thread for every slot held; a crashed worker's
slots are free once their leases end. A failed renewal or release is logged and otherwise left to
the lease: the slot frees itself when its lease ends.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid

from kinetis_queue.contracts import Queue, QueuedJob
from kinetis_queue.job import Job
from kinetis_queue.limits import ConcurrencyLimit, Slot, slot_key, slot_lease_of, slot_store_of
from kinetis_queue.middleware import Middleware
from kinetis_queue.outcomes import AtLimit
from kinetis_queue.worker.background import BackgroundLoop

logger = logging.getLogger("kinetis_queue.worker")


class SlotKeeper:
    """Takes, renews and gives back the concurrency slots of one worker's deliveries; thread-safe."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.store = slot_store_of(queue)
        self.lease = slot_lease_of(queue)
        self._lock = threading.Lock()
        self._held: dict[str, Slot] = {}
        self._loop = BackgroundLoop("slots", self._step)

    def take(self, instance: Job, limit: ConcurrencyLimit) -> Slot | None:
        """One of the job's key's slots, held (and renewed) until ``give_back()``; None at the limit."""
        key = slot_key(self.queue.connection, limit.key_of(instance))
        slot = self.store.acquire(key, limit.max, uuid.uuid4().hex, self.lease)
        if slot is not None:
            with self._lock:
                self._held[slot.token] = slot
            self._loop.start(delay=self.lease / 3)  # the slot was just taken: its first renewal is due then
        return slot

    def give_back(self, slot: Slot) -> None:
        """Release ``slot`` (its attempt ended); a failure leaves it to its lease."""
        with self._lock:
            self._held.pop(slot.token, None)
        try:
            self.store.release(slot)
        except Exception as exc:
            logger.warning(
                "A concurrency slot could not be given back (%s); it frees itself within %gs",
                type(exc).__name__,
                self.lease,
            )

    def close(self) -> None:
        self._loop.stop()

    def _step(self) -> float:
        """Renew every held slot; the next round comes a third of a lease later."""
        with self._lock:
            held = list(self._held.values())
        self._renew(held)
        return self.lease / 3

    def _renew(self, held: list[Slot]) -> None:
        started = time.monotonic()
        for slot in held:
            try:
                self.store.renew(slot, self.lease)
            except Exception as exc:  # the lease runs on; the next round tries again
                logger.warning("A concurrency slot's renewal failed (%s)", type(exc).__name__)
            if time.monotonic() - started > self.lease / 3:
                logger.warning("Renewing %d concurrency slots takes longer than a third of their lease", len(held))
                return


class LimitsMiddleware(Middleware):
    """Concurrency limits around a worker's deliveries (kinetis_queue.middleware): ``claim()`` takes one of the
    job's key's slots (AtLimit at the limit), ``unclaim()`` gives it back once the attempt is over. The worker's
    SlotKeeper is built on the first delivery of a limited class, so a worker without one starts no thread."""

    def __init__(self) -> None:
        self.queue: Queue | None = None
        self.keeper: SlotKeeper | None = None
        self._lock = threading.Lock()
        #: The slot each running delivery holds, by id() of its QueuedJob (each pool thread touches its own).
        self._held: dict[int, Slot] = {}

    def start(self, queue: Queue) -> None:
        self.queue = queue

    def stop(self) -> None:
        keeper, self.keeper = self.keeper, None
        if keeper is not None:
            keeper.close()

    def claim(self, job: QueuedJob, instance: Job) -> None:
        limit = instance.concurrency_limit_for()
        if limit is None:
            return
        slot = self._keeper().take(instance, limit)
        if slot is None:
            raise AtLimit(limit.delay, f"its concurrency key is at its limit of {limit.max}")
        self._held[id(job)] = slot

    def unclaim(self, job: QueuedJob) -> None:
        slot = self._held.pop(id(job), None)
        if slot is not None and self.keeper is not None:
            self.keeper.give_back(slot)

    def _keeper(self) -> SlotKeeper:
        keeper = self.keeper
        if keeper is None:
            with self._lock:
                keeper = self.keeper
                if keeper is None:  # pragma: no branch - else another pool thread built it since the look above
                    if self.queue is None:
                        raise RuntimeError("LimitsMiddleware.claim() before start(): the worker starts its hooks first")
                    keeper = self.keeper = SlotKeeper(self.queue)
        return keeper
