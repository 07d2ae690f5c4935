"""Deferred acks: a successful delivery's ack is sent with others in one ``Queue.ack_many()`` call.

The worker hands each success here; the batch is flushed before the worker's next reservation and,
by a flusher thread, at most ``MAX_ACK_DELAY`` seconds after its first ack was added (or at once
when ``MAX_ACK_BATCH`` are pending). Each delivery's logs, signals and JobReport line come from the
``done`` callback once its result is known: None when acked, the StaleJobHandleError when refused
(the LOST path, ``job_settlement_lost``). An error of ack_many() itself (the store is unreachable)
leaves that batch unsettled (its deliveries come back when their leases expire) and is raised by
the worker's next ``raise_error()``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

from django.db import connections

from kinetis_queue.contracts import Queue, QueuedJob
from kinetis_queue.exceptions import StaleJobHandleError

#: Longest time a success waits for its ack to be sent (seconds).
MAX_ACK_DELAY: Final = 0.005
#: A batch this large is sent at once.
MAX_ACK_BATCH: Final = 64

Done = Callable[[StaleJobHandleError | None], None]


class AckBatch:
    """Collects acks and sends them with ack_many(), from the worker's thread or the flusher thread."""

    def __init__(self, queue: Queue, max_delay: float = MAX_ACK_DELAY, max_batch: int = MAX_ACK_BATCH) -> None:
        self._queue = queue
        self._max_delay = max_delay
        self._max_batch = max_batch
        self._cond = threading.Condition()
        self._pending: list[tuple[QueuedJob, Done]] = []
        self._first_added = 0.0
        self._sending = threading.Lock()
        self._error: BaseException | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    def add(self, job: QueuedJob, done: Done) -> None:
        """Ack ``job`` soon; ``done`` is called with the result once it is known."""
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="kinetis-queue-acks", daemon=True)
                self._thread.start()
            if not self._pending:
                self._first_added = time.monotonic()
                self._cond.notify_all()
            self._pending.append((job, done))
            if len(self._pending) >= self._max_batch:
                self._cond.notify_all()

    def flush(self) -> None:
        """Send every ack added so far (waiting out a batch already being sent) and report each result."""
        with self._sending:
            with self._cond:
                batch, self._pending = self._pending, []
            if not batch:
                return
            try:
                results = self._queue.ack_many([job for job, _ in batch])
            except BaseException as exc:
                with self._cond:
                    self._error = self._error or exc
                return
        for (_, done), result in zip(batch, results, strict=True):
            done(result)

    def raise_error(self) -> None:
        """Raise the error an ack_many() call met since the last call, if any."""
        with self._cond:
            error, self._error = self._error, None
        if error is not None:
            raise error

    def close(self) -> None:
        """Flush what is pending, then end the flusher thread."""
        self.flush()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._closed and not self._due():
                        wait = self._first_added + self._max_delay - time.monotonic() if self._pending else None
                        self._cond.wait(wait)
                    if self._closed:
                        return
                self.flush()
        finally:
            connections.close_all()  # a database the acks (or their signal receivers) opened in this thread

    def _due(self) -> bool:
        if not self._pending:
            return False
        return len(self._pending) >= self._max_batch or time.monotonic() >= self._first_added + self._max_delay
