"""``--timeout`` for a job running off the main thread, where SIGALRM cannot reach it.

At ``--concurrency`` above 1 each sync job runs in a thread of the worker's pool, and Python cannot
interrupt a thread. So when an attempt passes its limit, this watchdog settles the delivery itself
as failed with JobTimeoutError (released for a retry or recorded and failed, per the retry rules)
and stops renewing its lease; the job's thread is abandoned to finish on its own, its result then
discarded, and its slot is not reused until it ends. One thread per worker, idle when nothing is armed.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable

from kinetis_queue.worker.background import BackgroundLoop


class Claim:
    """Who settles one delivery: the first caller of ``take()`` (the job's thread or the watchdog)."""

    __slots__ = ("_lock", "_taken")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._taken = False

    def take(self) -> bool:
        with self._lock:
            if self._taken:
                return False
            self._taken = True
            return True


class Watchdog:
    """Calls each armed callback once its deadline passes, unless it was disarmed first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed: list[tuple[float, int, Callable[[], None]]] = []
        self._cancelled: set[int] = set()
        self._counter = itertools.count()
        self._loop = BackgroundLoop("watchdog", self._step)

    def arm(self, seconds: float, expired: Callable[[], None]) -> int:
        """Call ``expired`` in the watchdog's thread ``seconds`` from now; return a token for disarm()."""
        token = next(self._counter)
        self._loop.start()
        with self._lock:
            heapq.heappush(self._armed, (time.monotonic() + seconds, token, expired))
        self._loop.wake()
        return token

    def disarm(self, token: int) -> None:
        with self._lock:
            if any(entry[1] == token for entry in self._armed):
                self._cancelled.add(token)

    def close(self) -> None:
        self._loop.stop()

    def _step(self) -> float | None:
        """Call the callback whose deadline passed first; else how long until the next deadline (None: none
        armed, until arm() wakes the loop)."""
        with self._lock:
            if not self._armed:
                return None
            wait = self._armed[0][0] - time.monotonic()
            if wait > 0:
                return wait
            _, token, expired = heapq.heappop(self._armed)
            if token in self._cancelled:
                self._cancelled.discard(token)
                return 0.0
        expired()  # outside the lock; the callback contains its own errors
        return 0.0
