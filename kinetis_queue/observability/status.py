"""The figures ``queue_status`` and the admin's status page show: per connection and queue, a snapshot.

Each number comes from the backend's ``Queue.stats()`` (see contracts.QueueStats for what each one
means) and the failed count from the FailedJob table. Nothing here decodes a payload. The figures
are point-in-time: under running workers they can change the moment they are read, and a live
reservation does not prove that a worker is still alive.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from kinetis_queue import conf, connections
from kinetis_queue.backends.sql import SqlQueue
from kinetis_queue.backends.sql.queue import JOBS_TABLE
from kinetis_queue.backends.sql.tables import explain
from kinetis_queue.contracts import DisposableQueue, Queue, QueueStats
from kinetis_queue.control import ALL_QUEUES
from kinetis_queue.db import tables
from kinetis_queue.failed import failed_counts
from kinetis_queue.outbox.relay import backlog, refused_count
from kinetis_queue.validation import QUEUE_NAME


@dataclass(frozen=True)
class QueueFigures:
    queue: str
    stats: QueueStats
    failed: int
    #: Whether the queue is paused on its connection (kinetis_queue.control: queue_pause).
    paused: bool = False


@dataclass(frozen=True)
class OutboxFigures:
    """A connection's transactional outbox (kinetis_queue/outbox): pushes committed, not relayed yet."""

    database: str
    waiting: int
    #: Seconds since the oldest waiting row was pushed; None when none waits.
    oldest_age: float | None
    #: OUTBOX_WARN: the backlog above which queue_status and check W005 warn.
    warn: int
    #: Rows the store refused for good: removed from the outbox, each now a failed-job record (OutboxRefusedError).
    refused: int = 0

    @property
    def over_threshold(self) -> bool:
        return self.waiting > self.warn


@dataclass(frozen=True)
class ConnectionFigures:
    connection: str
    backend: str
    queues: list[QueueFigures] = field(default_factory=list)
    #: Why this connection's figures could not be read (the backend is down, its library missing...).
    error: str | None = None
    #: Its outbox's backlog, when it has one (OUTBOX).
    outbox: OutboxFigures | None = None
    #: Whether every queue of the connection is paused (queue_pause --all), new ones included.
    all_paused: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "connection": self.connection,
            "backend": self.backend,
            "error": self.error,
            "queues": [
                {"queue": q.queue, **asdict(q.stats), "failed": q.failed, "paused": q.paused} for q in self.queues
            ],
            "outbox": None if self.outbox is None else asdict(self.outbox),
            "all_paused": self.all_paused,
        }


def collect(connection: str | None = None, queues: Sequence[str] | None = None) -> list[ConnectionFigures]:
    """Figures for ``connection`` (default: every configured one) and ``queues`` (default: every queue
    the backend can list, plus those with failed records and the paused ones, else "default").

    A connection whose figures cannot be read is returned with ``error`` set; the others still are.
    Raises QueueConfigurationError for a bad setting or an unknown connection, before any I/O, and
    QueueTablesMissingError when the failed-jobs table is missing (``migrate`` was not run).
    """
    loaded = conf.load()
    names = [conf.connection_settings(connection).name] if connection else list(loaded.connections)
    tables.require_for(None)
    failed = failed_counts(loaded.default_connection)
    paused = _paused()
    result = []
    for name in names:
        settings = loaded.connections[name]
        try:
            queue = connections.build(name)
        except Exception as exc:
            result.append(ConnectionFigures(name, settings.backend, error=f"{type(exc).__name__}: {exc}"))
            continue
        outbox = None
        try:
            outbox = _outbox(settings)  # first: a store that is down is when the backlog grows
            wanted = list(queues) if queues else _queue_names(queue, name, failed, paused)
            everything = (name, ALL_QUEUES) in paused
            figures = [
                QueueFigures(q, queue.stats(q), failed.get((name, q), 0), everything or (name, q) in paused)
                for q in wanted
            ]
            result.append(ConnectionFigures(name, settings.backend, figures, outbox=outbox, all_paused=everything))
        except Exception as exc:
            result.append(ConnectionFigures(name, settings.backend, error=_describe_error(queue, exc), outbox=outbox))
        finally:
            if isinstance(queue, DisposableQueue):
                queue.dispose()
    return result


def _outbox(settings: conf.ConnectionSettings) -> OutboxFigures | None:
    """The outbox backlog of a connection that has one (rows in its outbox database)."""
    if settings.outbox is None:
        return None

    waiting, oldest = backlog(settings.name, settings.outbox)
    age = None if oldest is None else max(0.0, time.time() - oldest)
    return OutboxFigures(settings.outbox.database, waiting, age, settings.outbox.warn, refused_count(settings.name))


def _describe_error(queue: Queue, exc: Exception) -> str:
    """Why figures are unavailable; a missing jobs table is said in plain words (run migrate)."""

    if isinstance(queue, SqlQueue):
        clear = explain(queue.database, exc, JOBS_TABLE)
        if clear is not None:
            exc = clear
    return f"{type(exc).__name__}: {exc}"


def _paused() -> set[tuple[str, str]]:
    """Every paused (connection, queue): one small query (kinetis_queue.control)."""
    from django.db import router

    from kinetis_queue.control.models import PausedQueue

    rows = PausedQueue.objects.using(router.db_for_write(PausedQueue)).values_list("connection", "queue")
    return set(rows)


def _queue_names(
    queue: Queue, connection: str, failed: dict[tuple[str, str], int], paused: set[tuple[str, str]]
) -> list[str]:
    names = set(queue.queue_names() or ())
    names.update(q for (c, q) in failed if c == connection)
    names.update(q for (c, q) in paused if c == connection)  # a paused queue is listed, jobs or not
    # A name outside the grammar (a hand-edited row) names no queue a worker could watch.
    return sorted(n for n in names if QUEUE_NAME.fullmatch(n)) or ["default"]
