"""What one connection's dashboard shows, gathered from the modules that already know it.

The queues' figures are ``status.collect(connection)``'s (what ``queue_status`` prints, so the two never
disagree); the charts and the slowest job classes are the history's (``series()``, ``slowest()``); the
workers and the jobs they run are the registry's (``workers()``, told the ready counts so that a worker
that stopped consuming shows as stalled); the failed jobs are the FailedJob table's newest records. Only
names, ids, counts and times are taken: never a job's arguments.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Final

from django.db.models import Q
from django.utils import timezone

from kinetis_queue import conf, failed
from kinetis_queue.models import FailedJob
from kinetis_queue.observability import history, registry, status

if TYPE_CHECKING:
    from django.db.models import QuerySet

#: The window of the charts and of the slowest job classes, in minutes.
WINDOW: Final = 60
#: How many job classes the slowest table lists.
SLOWEST: Final = 10
#: How many of the newest failed jobs the page lists (the failed-jobs admin has them all).
FAILED_SHOWN: Final = 10


def when(seconds: float) -> datetime:
    """Unix seconds as an aware local datetime (for the templates' ``date`` filter)."""
    return timezone.localtime(datetime.fromtimestamp(seconds, tz=timezone.get_current_timezone()))


@dataclass(frozen=True)
class Slow:
    """One job class's run times over the window."""

    job: str
    deliveries: int
    failed: int
    p50: float | None
    p95: float | None


@dataclass(frozen=True)
class Running:
    """A job a worker runs now, as the worker's registry row names it."""

    job: str
    id: str
    queue: str
    started: datetime
    seconds: float
    worker: str


@dataclass(frozen=True)
class Worker:
    """A worker process of the connection, as the registry describes it."""

    name: str
    state: str
    queues: list[str]
    concurrency: int
    running: int
    processed: int
    failed: int
    started: datetime
    last_seen: datetime


@dataclass(frozen=True)
class FailedShown:
    """A failed job's safe columns (kinetis_queue/failed.py: what a record may show)."""

    pk: int
    job: str
    job_id: str
    queue: str
    exception: str
    attempts: int
    failed_at: datetime


@dataclass(frozen=True)
class Dashboard:
    connection: status.ConnectionFigures
    #: (Unix minute, counts) for each minute of the window, oldest first.
    series: list[tuple[int, history.Counts]]
    slowest: list[Slow]
    workers: list[Worker]
    running: list[Running]
    failed: list[FailedShown]
    failed_total: int
    #: When the figures were read.
    read_at: datetime

    @property
    def deliveries(self) -> list[tuple[int, int]]:
        """Deliveries per minute (succeeded, released, failed and the other outcomes): the throughput."""
        return [(minute, counts.deliveries) for minute, counts in self.series]

    @property
    def failures(self) -> list[tuple[int, int]]:
        """Deliveries that failed for good per minute."""
        return [(minute, counts.failed) for minute, counts in self.series]

    @property
    def pushed(self) -> int:
        return sum(counts.pushed for _, counts in self.series)


def gather(connection: str, *, now: float | None = None) -> Dashboard:
    """The figures of ``connection`` (a configured name: conf.connection_settings() said so)."""
    now = time.time() if now is None else now
    figures = status.collect(connection)[0]
    found = registry.workers(connection, ready=registry.ready_jobs([figures]))
    records = _failed_records(connection)
    return Dashboard(
        connection=figures,
        series=history.series(connection, minutes=WINDOW, now=now),
        slowest=[
            Slow(job, counts.deliveries, counts.failed, counts.quantile(0.5), counts.quantile(0.95))
            for _, job, counts in history.slowest(connection, minutes=WINDOW, limit=SLOWEST, now=now)
        ],
        workers=[
            Worker(
                f"{w.host}:{w.pid}",
                w.state,
                w.queues,
                w.concurrency,
                len(w.running),
                w.processed,
                w.failed,
                when(w.started_at),
                when(w.last_seen),
            )
            for w in found
        ],
        running=sorted(
            (
                Running(
                    str(job.get("job", "")),
                    str(job.get("id", "")),
                    str(job.get("queue", "")),
                    when(float(job.get("started", now))),
                    max(0.0, now - float(job.get("started", now))),
                    f"{w.host}:{w.pid}",
                )
                for w in found
                for job in w.running
            ),
            key=lambda job: -job.seconds,
        ),
        failed=[
            FailedShown(
                record.pk,
                failed.shown_class(record),
                record.job_id,
                record.queue,
                record.exception_class.rpartition(".")[2],
                record.attempts,
                timezone.localtime(record.failed_at),
            )
            for record in records.order_by("-failed_at", "-id")[:FAILED_SHOWN]
        ],
        failed_total=records.count(),
        read_at=when(now),
    )


def _failed_records(connection: str) -> QuerySet[FailedJob]:
    """The connection's records; those of the unnamed default connection count as the default's."""
    records = FailedJob.objects.all()
    if connection == conf.load().default_connection:
        return records.filter(Q(connection=connection) | Q(connection__isnull=True) | Q(connection=""))
    return records.filter(connection=connection)
