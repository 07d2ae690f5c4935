"""Job classes for the worker's concurrency tests (tests/conformance/test_worker_concurrency.py).

They meet through module state, so the tests run the worker in this process. Each blocking wait is
bounded, so a worker that never runs them together fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from dataclasses import dataclass
from typing import Final

from kinetis_queue import Job, JobContext

#: The longest any job here waits for the others (seconds).
BOUND: Final = 30.0

BARRIERS: dict[int, threading.Barrier] = {}
#: Labels of the jobs that ran, in the order their handle() started.
STARTED: list[str] = []
#: (label, thread name, id of the running event loop) per async job that ran.
ASYNC_RAN: list[tuple[str, str, int]] = []
#: Set by a test to let the jobs that wait for it end.
RELEASE = threading.Event()
#: Set once a job that waits for RELEASE started.
WAITING = threading.Event()
#: Set by a test to let the jobs that wait for it end (HoldsUntil).
HOLD = threading.Event()
_lock = threading.Lock()
_async_arrived: list[int] = [0]


def reset() -> None:
    BARRIERS.clear()
    STARTED.clear()
    ASYNC_RAN.clear()
    RELEASE.clear()
    WAITING.clear()
    HOLD.clear()
    _async_arrived[0] = 0


@dataclass
class Meets(Job):
    """Waits until ``parties`` jobs of this kind run at once (a barrier); raises if they never do."""

    parties: int
    label: str = ""

    def handle(self) -> None:
        with _lock:
            barrier = BARRIERS.setdefault(self.parties, threading.Barrier(self.parties, timeout=BOUND))
        barrier.wait()
        STARTED.append(self.label)


@dataclass
class Started(Job):
    """Records its label."""

    label: str

    def handle(self) -> None:
        STARTED.append(self.label)


@dataclass
class SignalsTheWorker(Job):
    """Sends this process SIGTERM ``times`` times (the worker's stop), then records."""

    label: str
    times: int = 1

    def handle(self) -> None:
        for _ in range(self.times):
            os.kill(os.getpid(), signal.SIGTERM)
        STARTED.append(self.label)


@dataclass
class StopsAt(Job):
    """Records its label; the ``nth`` job of this kind to start sends this process SIGTERM."""

    nth: int
    label: str

    def handle(self) -> None:
        with _lock:
            STARTED.append(self.label)
            count = len(STARTED)
        if count == self.nth:
            os.kill(os.getpid(), signal.SIGTERM)


@dataclass
class WaitsForRelease(Job):
    """Sets WAITING, then waits for RELEASE (bounded) and records."""

    label: str

    def handle(self) -> None:
        WAITING.set()
        RELEASE.wait(BOUND)
        STARTED.append(self.label)


@dataclass
class HoldsUntil(Job):
    """Records its label, then waits for HOLD (bounded): keeps one slot busy."""

    label: str

    def handle(self) -> None:
        STARTED.append(self.label)
        HOLD.wait(BOUND)


@dataclass
class RecordsCorrelation(Job):
    """Records "<label>:<the correlation id in effect>" (kinetis_queue.observability.correlation)."""

    label: str

    def handle(self) -> None:
        from kinetis_queue.observability import correlation

        STARTED.append(f"{self.label}:{correlation.current()}")


@dataclass
class AsyncMeets(Job):
    """``async def handle``: waits until ``parties`` async jobs run at once, then records its loop."""

    parties: int
    label: str = ""

    async def handle(self, context: JobContext) -> None:
        _async_arrived[0] += 1  # only ever touched on the one event loop thread
        async with asyncio.timeout(BOUND):
            while _async_arrived[0] < self.parties:
                await asyncio.sleep(0.005)
        ASYNC_RAN.append((self.label, threading.current_thread().name, id(asyncio.get_running_loop())))


@dataclass
class AsyncSleeps(Job):
    """``async def handle`` that sleeps ``seconds``; records whether it was cancelled."""

    seconds: float
    label: str = ""

    async def handle(self) -> None:
        try:
            await asyncio.sleep(self.seconds)
        except asyncio.CancelledError:
            STARTED.append(f"cancelled:{self.label}")
            raise
        STARTED.append(self.label)
