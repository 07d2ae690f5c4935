"""The renewal heartbeat: keeps a running job's reservation alive (contract: "Reservation renewal").

One thread per worker, idle between jobs. While a job runs it renews at half the visibility
timeout with at most one call in flight; ``stop()`` waits out a call still in flight, so no
renewal survives into the settlement (on SQS a late renewal would undo a delayed release).
Failures are counted, not acted on: the worker logs them once, after the settlement.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from kinetis_queue import crashpoints
from kinetis_queue.contracts import QueuedJob, RenewableQueue


@dataclass(frozen=True, slots=True)
class RenewalReport:
    """What the heartbeat saw during one job."""

    renewals: int
    failures: int
    last_error: BaseException | None


class Heartbeat:
    """Renews the current job's reservation every ``interval`` seconds from a background thread."""

    def __init__(self, queue: RenewableQueue, interval: float | None = None) -> None:
        self._queue = queue
        self._interval = interval if interval is not None else max(queue.visibility_timeout() / 2, 0.05)
        self._cond = threading.Condition()
        self._job: QueuedJob | None = None
        self._due = 0.0
        self._in_flight = False
        self._closed = False
        self._renewals = 0
        self._failures = 0
        self._last_error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def start(self, job: QueuedJob) -> None:
        """Begin renewing ``job`` (the first renewal comes one interval from now)."""
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kinetis-queue-heartbeat", daemon=True)
                self._thread.start()
            self._job = job
            self._due = time.monotonic() + self._interval
            self._renewals = self._failures = 0
            self._last_error = None
            # No notify: an idle thread wakes at least once per interval (see _run), so it is awake
            # by the first renewal's due time. Waking it for every job cost a thread switch per
            # job, a large share of a Redis worker's time per no-op job (python -m bench.redis).

    def stop(self) -> RenewalReport:
        """Stop renewing and wait out a renewal still in flight; return what happened."""
        with self._cond:
            self._job = None
            while self._in_flight:
                self._cond.wait()
            return RenewalReport(self._renewals, self._failures, self._last_error)

    def close(self) -> None:
        """End the thread (the worker is exiting)."""
        with self._cond:
            self._closed = True
            self._job = None
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        with self._cond:
            while not self._closed:
                job = self._job
                if job is None:
                    self._cond.wait(self._interval)  # at most one interval: start() does not notify
                    continue
                wait = self._due - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                self._in_flight = True
                self._cond.release()
                error: BaseException | None = None
                try:
                    self._queue.renew(job)
                    crashpoints.reach("after_renew_sent")  # test-only; off unless KQ_CRASHPOINT names it
                except Exception as exc:  # counted and reported after the settlement, never acted on
                    error = exc
                finally:
                    self._cond.acquire()
                    self._in_flight = False
                    if error is None:
                        self._renewals += 1
                    else:
                        self._failures += 1
                        self._last_error = error
                    self._due = time.monotonic() + self._interval
                    self._cond.notify_all()
