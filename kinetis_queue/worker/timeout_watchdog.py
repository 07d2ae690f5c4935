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

from django.db import connections


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
        self._cond = threading.Condition()
        self._armed: list[tuple[float, int, Callable[[], None]]] = []
        self._cancelled: set[int] = set()
        self._counter = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False

    def arm(self, seconds: float, expired: Callable[[], None]) -> int:
        """Call ``expired`` in the watchdog's thread ``seconds`` from now; return a token for disarm()."""
        token = next(self._counter)
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kinetis-queue-watchdog", daemon=True)
                self._thread.start()
            heapq.heappush(self._armed, (time.monotonic() + seconds, token, expired))
            self._cond.notify_all()
        return token

    def disarm(self, token: int) -> None:
        with self._cond:
            if any(entry[1] == token for entry in self._armed):
                self._cancelled.add(token)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        try:
            self._serve()
        finally:
            connections.close_all()  # what the settlements made here opened in this thread

    def _serve(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._armed or self._armed[0][0] > time.monotonic()):
                    self._cond.wait(self._armed[0][0] - time.monotonic() if self._armed else None)
                if self._closed:
                    return
                _, token, expired = heapq.heappop(self._armed)
                if token in self._cancelled:
                    self._cancelled.discard(token)
                    continue
            expired()  # outside the lock; the callback contains its own errors
