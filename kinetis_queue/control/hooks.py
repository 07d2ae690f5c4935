"""The worker's side of cancelling and pausing: ``ControlHooks``, what the app plugs into every Worker.

A worker must not query anything per job, so what it asks (is this queue paused, was this job
cancelled) is answered from memory: a ``ControlView`` per connection and process, shared by every
Worker of that connection, holds the connection's paused queues and cancelled job ids. While a worker
runs, a background thread (kinetis_queue.worker.background) refreshes it every CONTROL_REFRESH seconds with
two small queries: the paused queues of the connection, and the cancellations added since the last
look (by primary key, so one indexed range read). A view no thread refreshes (hooks never started)
is refreshed on the delivery path itself when its data is older than CONTROL_REFRESH.

What the worker then does: ``active()`` leaves the paused queues out of each reservation;
``admit()`` skips a cancelled job (acked unrun: JobOutcome.SKIPPED) and gives back unstarted a job of a
queue paused since its reservation began (``Queue.unreserve()``, no attempt charged); ``cancelled()``
answers ``JobContext.cancelled``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Final

from kinetis_queue.control import ALL_QUEUES, CANCELLED
from kinetis_queue.middleware import Middleware
from kinetis_queue.outcomes import AtLimit, SkipDelivery
from kinetis_queue.unique import free_key
from kinetis_queue.worker.background import BackgroundLoop

if TYPE_CHECKING:
    from kinetis_queue.contracts import Queue, QueuedJob

logger = logging.getLogger("kinetis_queue")

#: How often a running worker reads its connection's paused queues and new cancellations (seconds):
#: how long a pause, a resume or a cancellation takes to reach it, about.
CONTROL_REFRESH: Final = 1.0
#: Cancellations are read by primary key, but a row's key is taken before its transaction commits: each
#: look reads again the rows added in the last LATE_COMMIT seconds, so one committed that late is still seen.
LATE_COMMIT: Final = 30.0
#: A delivery of a queue paused since its reservation began is given back for this long (seconds): at
#: once, since every worker leaves the queue out of its next reservation anyway.
PAUSED_DELAY: Final = 0.0


class ControlView:
    """What this process knows of one connection's paused queues and cancelled jobs.

    ``paused`` and ``cancelled`` are replaced whole (never changed in place), so any thread may read
    them without a lock. The cancelled ids accumulate for the process's life: a cancellation pruned
    from the table (``queue_prune``) is forgotten by workers started after the prune.
    """

    def __init__(self, connection: str) -> None:
        self.connection = connection
        self.paused: frozenset[str] = frozenset()
        self.cancelled: frozenset[str] = frozenset()
        #: time.monotonic() of the last successful refresh; None before the first.
        self.loaded_at: float | None = None
        #: time.monotonic() of the last refresh that raised; None after a success.
        self._failed_at: float | None = None
        self._highest = 0
        #: (when, the highest cancellation key seen by then), oldest first: where a look starts reading.
        self._checkpoints: deque[tuple[float, int]] = deque()
        self._refreshing = threading.Lock()
        self._users = 0
        self._users_lock = threading.Lock()
        self._loop: BackgroundLoop | None = None

    # -- the background refresh, shared by the workers that run ----------------------------------------

    def acquire(self) -> None:
        """A worker of the connection starts: refresh in the background while any runs. The first to start
        makes the next ``current()`` refresh at once, so a worker never starts on what an earlier one read."""
        with self._users_lock:
            self._users += 1
            if self._loop is None:
                self.loaded_at = self._failed_at = None
                self._loop = BackgroundLoop("control", self._step)
                self._loop.start()

    def release(self) -> None:
        """A worker stopped; the last one ends the background refresh."""
        with self._users_lock:
            self._users = max(0, self._users - 1)
            if self._users or self._loop is None:
                return
            loop, self._loop = self._loop, None
        loop.stop()

    @property
    def refreshed_in_background(self) -> bool:
        return self._loop is not None

    def _step(self) -> float:
        self.refresh()
        return CONTROL_REFRESH

    # -- reading --------------------------------------------------------------------------------------

    def current(self) -> ControlView:
        """This view, refreshed first when nothing keeps it fresh: never loaded yet, or no background thread
        and older than CONTROL_REFRESH. A failed refresh is logged and the data kept (at most one try per
        CONTROL_REFRESH): a worker whose database is down still runs its jobs."""
        loaded = self.loaded_at
        now = time.monotonic()
        if loaded is not None and (self._loop is not None or now - loaded <= CONTROL_REFRESH):
            return self
        failed = self._failed_at
        if failed is not None and now - failed < CONTROL_REFRESH:
            return self
        try:
            self.refresh(only_if_older_than=CONTROL_REFRESH)
        except Exception as exc:
            logger.warning(
                "The paused queues and cancellations of connection %s could not be read (%s: %s); "
                "the last ones known apply",
                self.connection,
                type(exc).__name__,
                exc,
            )
        return self

    def refresh(self, *, only_if_older_than: float | None = None) -> None:
        """Read the connection's paused queues (all of them) and its cancellations added since the last
        look (LATE_COMMIT seconds back). ``only_if_older_than``: skip when another thread just did."""
        from django.db import router

        from kinetis_queue.control.models import Cancellation, PausedQueue

        with self._refreshing:
            now = time.monotonic()
            if only_if_older_than is not None and self.loaded_at is not None:
                if now - self.loaded_at <= only_if_older_than:
                    return
            paused = PausedQueue.objects.using(router.db_for_write(PausedQueue)).filter(connection=self.connection)
            added = Cancellation.objects.using(router.db_for_write(Cancellation)).filter(
                connection=self.connection, pk__gt=self._floor(now)
            )
            try:
                names = frozenset(paused.values_list("queue", flat=True))
                rows = list(added.values_list("pk", "job_id"))
            except Exception:
                self._failed_at = now
                raise
            self.paused = names
            ids = {job_id for _, job_id in rows}
            if not ids <= self.cancelled:
                self.cancelled = self.cancelled | ids
            self._highest = max([self._highest, *(pk for pk, _ in rows)])
            self._checkpoints.append((now, self._highest))
            self.loaded_at, self._failed_at = now, None

    def _floor(self, now: float) -> int:
        """The key after which this look reads: the highest seen at the newest look LATE_COMMIT seconds old
        (the first look's, while none is that old; 0 before any)."""
        checkpoints = self._checkpoints
        while len(checkpoints) >= 2 and checkpoints[1][0] <= now - LATE_COMMIT:
            checkpoints.popleft()
        return checkpoints[0][1] if checkpoints else 0


_VIEWS: dict[str, ControlView] = {}
_VIEWS_LOCK = threading.Lock()


def view_of(connection: str) -> ControlView:
    """The process's view of ``connection``, made on first use."""
    with _VIEWS_LOCK:
        view = _VIEWS.get(connection)
        if view is None:
            view = _VIEWS[connection] = ControlView(connection)
        return view


class ControlHooks(Middleware):
    """Pausing and cancellation around a worker's deliveries; every answer is a set lookup in memory.

    ``connection`` names the connection when the hooks are used without ``start()``; otherwise
    ``start(queue)`` takes ``queue.connection`` (a queue built by hand under no name: no control).
    """

    def __init__(self, connection: str | None = None) -> None:
        self._view = None if connection is None else view_of(connection)
        self._queue: Queue | None = None
        self._started = False

    def start(self, queue: Queue) -> None:
        if self._started or queue.connection is None:
            return
        self._queue = queue
        self._view = view_of(queue.connection)
        self._view.acquire()
        self._started = True

    def stop(self) -> None:
        if self._started and self._view is not None:
            self._started = False
            self._view.release()

    def _current(self) -> ControlView | None:
        return None if self._view is None else self._view.current()

    def active(self, queues: tuple[str, ...]) -> tuple[str, ...]:
        view = self._current()
        if view is None or not view.paused:
            return queues
        paused = view.paused
        if ALL_QUEUES in paused:  # queue_pause --all
            return ()
        return tuple(name for name in queues if name not in paused)

    def admit(self, job: QueuedJob) -> None:
        view = self._current()
        if view is None:
            return
        if job.id in view.cancelled:
            self._free_unique_key(job)
            raise SkipDelivery(CANCELLED)
        paused = view.paused
        if paused and (job.queue in paused or ALL_QUEUES in paused):  # reserved by a pop that began before the
            raise AtLimit(PAUSED_DELAY, f"its queue {job.queue} is paused")  # pause: not started, given back

    def cancelled(self, job: QueuedJob) -> bool:
        view = self._current()
        return view is not None and job.id in view.cancelled

    def _free_unique_key(self, job: QueuedJob) -> None:
        """A cancelled unique job will never start nor settle: free its key now (scopes "started" and
        "settled"), as its first attempt or its settlement would have, rather than at ``unique_for``'s end.
        The stores fence the release on the job's id and generation. A store that fails is logged: the key
        then expires by itself. (On SQL the key goes with the job's row, deleted by the skip's ack.)"""
        queue = self._queue
        if queue is None:
            return
        try:
            free_key(queue, job)
        except Exception as exc:
            logger.warning(
                "The unique key of cancelled job %s could not be freed (%s); it frees itself when it expires",
                job.id,
                type(exc).__name__,
            )


#: Its name in KINETIS_QUEUE["MIDDLEWARE"] (kinetis_queue.middleware.DEFAULT_MIDDLEWARE).
ControlMiddleware = ControlHooks
