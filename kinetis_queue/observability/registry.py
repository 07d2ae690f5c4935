"""The worker registry: every ``queue_work`` process says, every INTERVAL seconds, who it is and what it runs.

Its row (kinetis_queue_workers, in the Django database) holds the host, pid, connection, watched
queues, concurrency, start time, the jobs running now (class name, id, queue, start: never an
argument), and processed / failed counts. The worker keeps these in memory as its deliveries report
(a dict update per job) and writes the row from a background thread, so no delivery waits on it.

Reading it (``queue_workers``, the dashboard, ``queue_health``): a worker not seen for GONE_AFTER
seconds (three intervals) is gone, and its row is no longer listed once EXPIRE_AFTER old (deleted by the
next worker that registers: reading never writes, so a probe or a scrape costs no write); a live worker whose
every slot runs a job is "busy"; one with a free slot that took no delivery (started, deferred or
skipped one) for STALLED_AFTER seconds while one of its queues that is not paused holds ready jobs is
"stalled" (the "silently stopped consuming" failure). Deferred and snoozed jobs wait as delayed jobs,
not ready ones, and a paused queue's jobs are not ready for anyone (``ready_jobs()``).

One clock: every time in a row, and the "now" a reader compares them with, is the Django database's
(``database_clock()``): a worker keeps monotonic readings and writes each as the database's "now" less
the time since, so a worker or a reader whose wall clock is off (or stepped) is judged right.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from django.db import connections, router

from kinetis_queue.contracts import Queue, QueuedJob
from kinetis_queue.db.transactions import write_atomic
from kinetis_queue.hooks import DeliveryHooks
from kinetis_queue.observability.models import WorkerRecord
from kinetis_queue.outcomes import JobOutcome, JobReport
from kinetis_queue.worker.background import BackgroundLoop
from kinetis_queue.worker.log import job_name

if TYPE_CHECKING:
    from kinetis_queue.observability.status import ConnectionFigures

#: Seconds between two writes of a worker's row.
INTERVAL: Final = 5.0
#: A worker not seen for this long is gone.
GONE_AFTER: Final = 3 * INTERVAL
#: A gone worker's row is deleted once it is this old.
EXPIRE_AFTER: Final = 3600.0
#: A live worker with a free slot that took no delivery for this long while its queues hold ready jobs is stalled.
STALLED_AFTER: Final = 60.0

#: The database's clock as Unix seconds, per vendor (another vendor: this process's clock).
_CLOCK_SQL: Final = {
    "postgresql": "SELECT EXTRACT(EPOCH FROM clock_timestamp())",
    "mysql": "SELECT UNIX_TIMESTAMP(NOW(6))",
    "sqlite": "SELECT (julianday('now') - 2440587.5) * 86400.0",
}


def database_clock(alias: str | None = None) -> float:
    """Now, by the clock of the registry's database (``alias``): the one clock every registry time is on."""
    alias = alias or router.db_for_write(WorkerRecord)
    sql = _CLOCK_SQL.get(connections[alias].vendor)
    if sql is None:
        return time.time()
    with connections[alias].cursor() as cursor:
        cursor.execute(sql)
        row = cursor.fetchone()
    return float(row[0])


def ready_jobs(figures: Sequence[ConnectionFigures]) -> dict[str, int]:
    """Ready jobs per "connection/queue" that a worker should be taking: a paused queue's count none."""
    return {f"{f.connection}/{q.queue}": 0 if q.paused else q.stats.ready or 0 for f in figures for q in f.queues}


class WorkerRegistry(DeliveryHooks):
    """One worker process's entry in the registry (a hook of the worker it describes)."""

    wants_reports = True

    def __init__(self, connection: str, queues: Sequence[str], concurrency: int) -> None:
        self.id = uuid.uuid4().hex
        self.connection = connection
        self.queues = list(queues)
        self.concurrency = concurrency
        # This process's times are monotonic readings, turned into the database's clock as the row is written.
        self.started_at = time.monotonic()
        #: When it last took a delivery: started, deferred or skipped it (all of them are consuming).
        self.last_started: float | None = None
        self.processed = 0
        self.failed = 0
        #: The running deliveries by job id: (the delivery, when it started).
        self._running: dict[str, tuple[QueuedJob, float]] = {}
        self._lock = threading.Lock()
        self._loop: BackgroundLoop | None = None
        self._pruned = False

    # -- the hooks ------------------------------------------------------------------------------

    def start(self, queue: Queue) -> None:
        if self._loop is None:
            self._loop = BackgroundLoop("worker registry", self._write, on_stop=self._remove)
            self._loop.start()

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.stop()
            self._loop = None

    def started(self, job: QueuedJob) -> None:
        # No lock: a dict's set and pop are atomic, and the row is written from a copy (_write).
        now = time.monotonic()
        self.last_started = now
        self._running[job.id] = (job, now)

    def ended(self, job: QueuedJob) -> None:
        self._running.pop(job.id, None)

    def reported(self, job: QueuedJob, report: JobReport) -> None:
        self.last_started = time.monotonic()  # a deferral or a skip is activity too (never started)
        if report.outcome is JobOutcome.DEFERRED:
            return  # given back unstarted: the same job comes again, and is counted then
        with self._lock:
            self.processed += 1
            if report.outcome is JobOutcome.FAILED:
                self.failed += 1

    # -- the row --------------------------------------------------------------------------------

    def _write(self) -> float:
        alias = router.db_for_write(WorkerRecord)
        # Written on the database's clock: each monotonic reading is "now" there, less the time since.
        now = database_clock(alias)
        offset = now - time.monotonic()
        running = [
            {"id": job.id, "job": job_name(job), "queue": job.queue, "started": started + offset}
            for job, started in sorted(self._running.copy().values(), key=lambda item: item[1])
        ]
        with self._lock:
            fields = {
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "connection": self.connection,
                "queues": ",".join(self.queues),
                "concurrency": self.concurrency,
                "started_at": self.started_at + offset,
                "last_seen": now,
                "last_started": None if self.last_started is None else self.last_started + offset,
                "running": json.dumps(running),
                "processed": self.processed,
                "failed": self.failed,
            }
        with write_atomic(alias):  # update_or_create reads, then writes: on SQLite it must lock at BEGIN
            if not self._pruned:  # once a process: rows of workers gone for EXPIRE_AFTER (readers never write)
                WorkerRecord.objects.using(alias).filter(last_seen__lt=now - EXPIRE_AFTER).delete()
                self._pruned = True
            WorkerRecord.objects.using(alias).update_or_create(pk=self.id, defaults=fields)
        return INTERVAL

    def _remove(self) -> None:
        """A worker that stops cleanly leaves the registry at once (a killed one is gone after GONE_AFTER)."""
        try:
            WorkerRecord.objects.using(router.db_for_write(WorkerRecord)).filter(pk=self.id).delete()
        except Exception:  # noqa: S110 - best effort: the row expires anyway
            pass


@dataclass(frozen=True)
class WorkerStatus:
    """A registry row as queue_workers and the dashboard show it."""

    id: str
    host: str
    pid: int
    connection: str
    queues: list[str]
    concurrency: int
    started_at: float
    last_seen: float
    last_started: float | None
    running: list[dict[str, Any]]
    processed: int
    failed: int
    #: "alive"; "busy" (alive, every slot runs a job); "stalled" (alive with a free slot, took no delivery
    #: for STALLED_AFTER while a queue of it that is not paused holds ready jobs); or "gone".
    state: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def workers(
    connection: str | None = None, *, now: float | None = None, ready: dict[str, int] | None = None
) -> list[WorkerStatus]:
    """The registry (one connection's, or all) but rows older than EXPIRE_AFTER; it reads only, never writes.

    ``ready``: ready jobs per "connection/queue" (``ready_jobs()`` of queue_status' figures) to tell a
    stalled worker; without it none is flagged. ``now``: the database's clock unless given (tests).
    """
    alias = router.db_for_write(WorkerRecord)
    now = database_clock(alias) if now is None else now
    rows = WorkerRecord.objects.using(alias).filter(last_seen__gte=now - EXPIRE_AFTER)
    if connection is not None:
        rows = rows.filter(connection=connection)
    result = []
    for row in rows.order_by("connection", "host", "pid"):
        queues = [q for q in row.queues.split(",") if q]
        running = json.loads(row.running)
        result.append(
            WorkerStatus(
                row.pk,
                row.host,
                row.pid,
                row.connection,
                queues,
                row.concurrency,
                row.started_at,
                row.last_seen,
                row.last_started,
                running,
                row.processed,
                row.failed,
                _state(row, queues, len(running), now, ready),
            )
        )
    return result


def _state(row: WorkerRecord, queues: list[str], running: int, now: float, ready: dict[str, int] | None) -> str:
    """Gone, busy, stalled or alive (see WorkerStatus.state)."""
    if row.last_seen < now - GONE_AFTER:
        return "gone"
    if running >= row.concurrency:
        return "busy"  # no free slot: nothing to take, however many jobs wait
    idle_since = row.last_started if row.last_started is not None else row.started_at
    if ready is not None and idle_since < now - STALLED_AFTER:
        if any(ready.get(f"{row.connection}/{queue}", 0) > 0 for queue in queues):
            return "stalled"
    return "alive"
