"""The one loop type of every thread a worker runs beside its jobs.

Each round is ``step()``, which returns how long to wait before the next one: seconds, or None to wait
until ``wake()``. ``wake()`` starts the next round now (an ack batch that filled up, a deadline armed
sooner than the one waited for). The schedules, the outbox relay, the worker registry, the history
writer, the heartbeat file, the control refresh, workflow recovery, the lease heartbeat, the ack batch,
the watchdog of job timeouts and the concurrency slots' renewal each run in one. The thread uses Django
connections of its own and closes them when it ends.

Not here: Django's autoreloader (queue_work --reload drives Django's own ticker) and the SQL backend's
socket deadlines (kinetis_queue/backends/sql/timeouts.py), which a backend keeps to itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Final

from django.db import connections

logger = logging.getLogger("kinetis_queue")

#: How long stop() waits for the thread to end (seconds): a round in flight is bounded by its store.
JOIN_TIMEOUT: Final = 10.0
#: The pause after a round that raised (seconds).
ERROR_PAUSE: Final = 1.0


class BackgroundLoop:
    """Calls ``step()`` in a daemon thread from ``start()`` until ``stop()``; a round that raises is logged,
    then retried after ERROR_PAUSE. ``start()`` may be called on each use: only the first starts the thread."""

    def __init__(
        self, name: str, step: Callable[[], float | None], *, on_stop: Callable[[], None] | None = None
    ) -> None:
        self.name = name
        self._step = step
        self._on_stop = on_stop
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._delay = 0.0
        self._starting = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self, delay: float = 0.0) -> None:
        """Start the thread (once; later calls do nothing); its first round comes ``delay`` seconds later."""
        if self._thread is not None:
            return
        with self._starting:
            if self._thread is None and not self._stop.is_set():
                self._delay = delay
                thread = threading.Thread(target=self._run, name=f"kinetis-queue-{self.name}", daemon=True)
                thread.start()
                self._thread = thread

    def wake(self) -> None:
        """Run the next round now, or as soon as the round in flight ends."""
        self._wake.set()

    def stop(self, timeout: float = JOIN_TIMEOUT) -> None:
        """Ask the thread to end after its round, and wait for it (at most ``timeout`` seconds)."""
        with self._starting:
            self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout)

    def _run(self) -> None:
        try:
            if self._delay > 0:
                self._wake.wait(self._delay)
            while not self._stop.is_set():
                self._wake.clear()  # before the round: a wake() during it starts the next one at once
                try:
                    wait = self._step()
                except Exception as exc:  # never end the worker: try again after a pause
                    logger.error("The worker's %s failed: %s: %s", self.name, type(exc).__name__, exc)
                    wait = ERROR_PAUSE
                if wait is None or wait > 0:
                    self._wake.wait(wait)
        finally:
            if self._on_stop is not None:
                self._on_stop()
            connections.close_all()
