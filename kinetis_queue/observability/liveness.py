"""A worker's liveness, local to its process: a heartbeat file it keeps fresh while it is alive.

A liveness probe restarts the one container that fails it, so it must ask nothing shared: not the
store (an outage would restart every worker at once) and not the registry of the other workers.
``queue_work --heartbeat-file PATH`` touches PATH every TOUCH_EVERY seconds while the worker is alive;
``queue_health --self --heartbeat-file PATH --max-age N`` reads only the file's modification time,
written and read by the same host's clock, and fails once it is older than N seconds.

Alive: the reserving loop turned (asked which queues it may pop) within its poll wait plus
TURN_MARGIN, or a job is running. A worker whose every slot runs a long job is busy, not dead; one
waiting on a paused queue turns its loop twice a second. A loop stuck with nothing running stops the
touches, and so does a process that stopped running Python (deadlocked, frozen): the file ages.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final

from kinetis_queue.hooks import DeliveryHooks
from kinetis_queue.worker.background import BackgroundLoop
from kinetis_queue.worker.log import contained, logger

if TYPE_CHECKING:
    from kinetis_queue.contracts import Queue, QueuedJob

#: Seconds between two touches of the heartbeat file while the worker is alive.
TOUCH_EVERY: Final = 1.0
#: A loop turn may come this many seconds after the poll wait before the worker counts as stuck.
TURN_MARGIN: Final = 30.0
#: ``queue_health --self``'s default --max-age (seconds).
DEFAULT_MAX_AGE: Final = 60.0


def touch(path: Path) -> None:
    """Set the file's modification time to now, creating it when missing."""
    path.touch(exist_ok=True)


class HeartbeatFile(DeliveryHooks):
    """A worker hook: keeps ``path`` fresh while the worker's loop turns or a job of it runs."""

    def __init__(self, path: Path, poll_wait: float) -> None:
        self.path = path
        self.grace = poll_wait + TURN_MARGIN
        self._last_turn = time.monotonic()
        self._running: set[str] = set()
        self._lock = threading.Lock()
        self._loop: BackgroundLoop | None = None
        self._failing = False

    def start(self, queue: Queue) -> None:
        self._last_turn = time.monotonic()
        touch(self.path)
        if self._loop is None:
            self._loop = BackgroundLoop("heartbeat file", self._beat)
            self._loop.start()

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.stop()
            self._loop = None

    def active(self, queues: tuple[str, ...]) -> tuple[str, ...]:
        self._last_turn = time.monotonic()  # one store per reservation: the loop turned
        return queues

    def started(self, job: QueuedJob) -> None:
        with self._lock:
            self._running.add(job.id)

    def ended(self, job: QueuedJob) -> None:
        with self._lock:
            self._running.discard(job.id)

    def alive(self) -> bool:
        """The loop turned recently, or a job runs."""
        with self._lock:
            if self._running:
                return True
        return time.monotonic() - self._last_turn <= self.grace

    def _beat(self) -> float:
        if self.alive():
            try:
                touch(self.path)
            except OSError as exc:  # said once, not every second: the probe's failure says the rest
                if not self._failing:
                    contained(logger.warning, "The heartbeat file %s cannot be touched: %s", self.path, exc.strerror)
                self._failing = True
            else:
                self._failing = False
        return TOUCH_EVERY


def heartbeat_problem(path: Path, max_age: float) -> str | None:
    """Why the heartbeat file at ``path`` says its worker is not alive; None when it is fresh enough."""
    try:
        modified = path.stat().st_mtime
    except FileNotFoundError:
        return f"no heartbeat file at {path} (is the worker started with --heartbeat-file {path}?)"
    except OSError as exc:
        return f"the heartbeat file {path} cannot be read: {exc.strerror or type(exc).__name__}"
    age = time.time() - modified
    if age > max_age:
        return f"the heartbeat file {path} is {age:.0f}s old (more than --max-age {max_age:g}s)"
    return None
