"""The worker registry: every ``queue_work`` process says, every INTERVAL seconds, who it is and what it runs.

Its row (kinetis_queue_workers, in the Django database) holds the host, pid, connection, watched
queues, concurrency, start time, the jobs running now (class name, id, queue, start: never an
argument), and processed / failed counts. The worker keeps these in memory as its deliveries report
(a dict update per job) and writes the row from a background thread, so no delivery waits on it.

Reading it (``queue_workers``, the dashboard, ``queue_health``): a worker not seen for GONE_AFTER
seconds (three intervals) is gone, and its row is deleted once EXPIRE_AFTER old; a live worker that
started nothing for STALLED_AFTER seconds while its queues hold ready jobs is flagged "stalled" (the
"silently stopped consuming" failure).
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
from typing import Any, Final

from django.db import router

from kinetis_queue.background import BackgroundLoop
from kinetis_queue.contracts import Queue, QueuedJob
from kinetis_queue.hooks import DeliveryHooks
from kinetis_queue.observability.models import WorkerRecord
from kinetis_queue.outcomes import JobOutcome, JobReport
from kinetis_queue.transactions import write_atomic
from kinetis_queue.worker_log import job_name

#: Seconds between two writes of a worker's row.
INTERVAL: Final = 5.0
#: A worker not seen for this long is gone.
GONE_AFTER: Final = 3 * INTERVAL
#: A gone worker's row is deleted once it is this old.
EXPIRE_AFTER: Final = 3600.0
#: A live worker that started nothing for this long while its queues hold ready jobs is stalled.
STALLED_AFTER: Final = 60.0


class WorkerRegistry(DeliveryHooks):
    """One worker process's entry in the registry (a hook of the worker it describes)."""

    wants_reports = True

    def __init__(self, connection: str, queues: Sequence[str], concurrency: int) -> None:
        self.id = uuid.uuid4().hex
        self.connection = connection
        self.queues = list(queues)
        self.concurrency = concurrency
        self.started_at = time.time()
        self.last_started: float | None = None
        self.processed = 0
        self.failed = 0
        #: The running deliveries by job id: (the delivery, when it started).
        self._running: dict[str, tuple[QueuedJob, float]] = {}
        self._lock = threading.Lock()
        self._loop: BackgroundLoop | None = None

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
        now = time.time()
        self.last_started = now
        self._running[job.id] = (job, now)

    def ended(self, job: QueuedJob) -> None:
        self._running.pop(job.id, None)

    def reported(self, job: QueuedJob, report: JobReport) -> None:
        with self._lock:
            self.processed += 1
            if report.outcome is JobOutcome.FAILED:
                self.failed += 1

    # -- the row --------------------------------------------------------------------------------

    def _write(self) -> float:
        running = [
            {"id": job.id, "job": job_name(job), "queue": job.queue, "started": started}
            for job, started in sorted(self._running.copy().values(), key=lambda item: item[1])
        ]
        with self._lock:
            fields = {
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "connection": self.connection,
                "queues": ",".join(self.queues),
                "concurrency": self.concurrency,
                "started_at": self.started_at,
                "last_seen": time.time(),
                "last_started": self.last_started,
                "running": json.dumps(running),
                "processed": self.processed,
                "failed": self.failed,
            }
        alias = router.db_for_write(WorkerRecord)
        with write_atomic(alias):  # update_or_create reads, then writes: on SQLite it must lock at BEGIN
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
    #: "alive", "stalled" (alive, started nothing for STALLED_AFTER while its queues hold ready jobs) or "gone".
    state: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def workers(
    connection: str | None = None, *, now: float | None = None, ready: dict[str, int] | None = None
) -> list[WorkerStatus]:
    """The registry (one connection's, or all), gone rows older than EXPIRE_AFTER deleted first.

    ``ready``: ready jobs per "connection/queue" (from queue_status' figures) to tell a stalled worker;
    without it none is flagged.
    """
    now = time.time() if now is None else now
    rows = WorkerRecord.objects.using(router.db_for_write(WorkerRecord))
    rows.filter(last_seen__lt=now - EXPIRE_AFTER).delete()
    if connection is not None:
        rows = rows.filter(connection=connection)
    result = []
    for row in rows.order_by("connection", "host", "pid"):
        queues = [q for q in row.queues.split(",") if q]
        state = "gone" if row.last_seen < now - GONE_AFTER else "alive"
        idle_since = row.last_started if row.last_started is not None else row.started_at
        if state == "alive" and ready is not None and idle_since < now - STALLED_AFTER:
            if any(ready.get(f"{row.connection}/{queue}", 0) > 0 for queue in queues):
                state = "stalled"
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
                json.loads(row.running),
                row.processed,
                row.failed,
                state,
            )
        )
    return result
