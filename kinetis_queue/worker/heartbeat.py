"""The renewal heartbeat: keeps every delivery a worker holds reserved (contract: "Reservation renewal").

One thread per worker, idle while nothing is held. Each held delivery (running, or reserved ahead
and not started yet) is renewed at half the visibility timeout, one call in flight at a time;
``stop(job)`` waits out a call still in flight for that delivery, so no renewal survives into its
settlement (on SQS a late renewal would undo a delayed release). Failures are counted per
delivery, not acted on: the worker logs them once, after the settlement.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from kinetis_queue import crashpoints
from kinetis_queue.contracts import QueuedJob, RenewableQueue
from kinetis_queue.worker.background import BackgroundLoop


@dataclass(frozen=True, slots=True)
class RenewalReport:
    """What the heartbeat saw for one delivery."""

    renewals: int
    failures: int
    last_error: BaseException | None


@dataclass(slots=True)
class _Lease:
    job: QueuedJob
    due: float
    renewals: int = 0
    failures: int = 0
    last_error: BaseException | None = None


_NOTHING = RenewalReport(0, 0, None)


class Heartbeat:
    """Renews each held delivery's reservation every ``interval`` seconds from a background thread."""

    def __init__(self, queue: RenewableQueue, interval: float | None = None) -> None:
        self._queue = queue
        self._interval = interval if interval is not None else max(queue.visibility_timeout() / 2, 0.05)
        self._cond = threading.Condition()
        # Keyed by the delivery object itself: two deliveries of one job id are two leases.
        self._leases: dict[int, _Lease] = {}
        self._in_flight: int | None = None
        self._loop = BackgroundLoop("heartbeat", self._step)

    def start(self, job: QueuedJob) -> None:
        """Begin renewing ``job`` (the first renewal comes one interval from now); a delivery already
        held keeps its schedule."""
        self._loop.start()
        with self._cond:
            if id(job) not in self._leases:
                self._leases[id(job)] = _Lease(job, time.monotonic() + self._interval)
            # No wake: an idle thread waits at most one interval (see _step), so it is awake by the
            # first renewal's due time. Waking it for every job cost a thread switch per job, a large
            # share of a Redis worker's time per no-op job (python -m bench.redis).

    def stop(self, job: QueuedJob) -> RenewalReport:
        """Stop renewing ``job`` and wait out a renewal of it still in flight; return what happened."""
        with self._cond:
            lease = self._leases.pop(id(job), None)
            while self._in_flight == id(job):
                self._cond.wait()
            if lease is None:
                return _NOTHING
            return RenewalReport(lease.renewals, lease.failures, lease.last_error)

    def close(self) -> None:
        """End the thread (the worker is exiting)."""
        with self._cond:
            self._leases.clear()
        self._loop.stop()

    def _step(self) -> float:
        """Renew the lease due first once it is due; how long until the next one may be (at most one
        interval: start() does not wake the loop)."""
        with self._cond:
            if not self._leases:
                return self._interval
            lease = min(self._leases.values(), key=lambda held: held.due)
            wait = lease.due - time.monotonic()
            if wait > 0:
                return min(wait, self._interval)
            self._renew(lease)
        return 0.0

    def _renew(self, lease: _Lease) -> None:
        """One renewal, made outside the lock (called and returning with it held)."""
        self._in_flight = id(lease.job)
        self._cond.release()
        error: BaseException | None = None
        try:
            self._queue.renew(lease.job)
            crashpoints.reach("after_renew_sent")  # test-only; off unless KQ_CRASHPOINT names it
        except Exception as exc:  # counted and reported after the settlement, never acted on
            error = exc
        finally:
            self._cond.acquire()
            self._in_flight = None
            if error is None:
                lease.renewals += 1
            else:
                lease.failures += 1
                lease.last_error = error
            lease.due = time.monotonic() + self._interval
            self._cond.notify_all()
