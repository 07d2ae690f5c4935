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

from kinetis_queue.contracts import Queue, QueuedJob
from kinetis_queue.exceptions import StaleJobHandleError
from kinetis_queue.worker.background import BackgroundLoop

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
        self._loop = BackgroundLoop("acks", self._step)

    def add(self, job: QueuedJob, done: Done) -> None:
        """Ack ``job`` soon; ``done`` is called with the result once it is known."""
        self._loop.start()
        with self._cond:
            first = not self._pending
            if first:
                self._first_added = time.monotonic()
            self._pending.append((job, done))
            full = len(self._pending) >= self._max_batch
        if first or full:  # the flusher waits for the first ack of a batch, then for its deadline or a full batch
            self._loop.wake()

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
        self._loop.stop()

    def _step(self) -> float | None:
        """One round of the flusher: send the batch once it is due; how long until the next one is."""
        with self._cond:
            if not self._pending:
                return None  # until add() wakes it
            wait = self._first_added + self._max_delay - time.monotonic()
            if len(self._pending) < self._max_batch and wait > 0:
                return wait
        self.flush()
        return 0.0
