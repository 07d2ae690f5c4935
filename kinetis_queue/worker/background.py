"""A loop in a daemon thread beside the worker: what ``queue_work`` runs besides its jobs.

The schedules (kinetis_queue/schedules) and the outbox relay (kinetis_queue/outbox) each run here:
``step()`` does one round and returns how long to wait before the next. The thread uses Django
connections of its own and closes them when it ends.
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
    """Calls ``step()`` in a daemon thread until ``stop()``; a round that raises is logged, then retried."""

    def __init__(self, name: str, step: Callable[[], float], *, on_stop: Callable[[], None] | None = None) -> None:
        self.name = name
        self._step = step
        self._on_stop = on_stop
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"kinetis-queue-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ask the thread to end after its round, and wait for it (at most JOIN_TIMEOUT)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(JOIN_TIMEOUT)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                try:
                    wait = self._step()
                except Exception as exc:  # never end the worker: try again after a pause
                    logger.error("The worker's %s failed: %s: %s", self.name, type(exc).__name__, exc)
                    wait = ERROR_PAUSE
                if wait > 0:
                    self._stop.wait(wait)
        finally:
            if self._on_stop is not None:
                self._on_stop()
            connections.close_all()
