"""Per-minute history: pushes and deliveries per connection, queue and job class, kept KEEP_HOURS.

The counts are the process's tally (tally.py: a few list additions per push or delivery); a daemon
thread, started by the process's first count, writes what changed at most every FLUSH_EVERY seconds:
one row per (minute, process, connection, queue, job) in ``kinetis_queue_history``, rewritten whole by
an upsert, so a flush repeated after an error counts nothing twice and two processes never write the
same row. Rows older than KEEP_HOURS are deleted as the flushes go, and the oldest minutes beyond
MAX_ROWS rows; a job name this process does not know is counted as registry.UNKNOWN_NAME (tally.py).
While the database refuses the writes, the tally keeps at most an hour of ended minutes: memory and
the table are bounded.

Readers sum over the processes: ``series()`` (per minute), ``totals()`` (per queue), ``slowest()`` (per
job class, p50/p95 from the tally's BUCKETS): ``queue_status --history`` and the dashboard. Switched
off with ``KINETIS_QUEUE["HISTORY"] = False``.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Final

from django.db import connections, router

from kinetis_queue.observability.models import HistoryMinute
from kinetis_queue.observability.tally import (
    BUCKETS,
    FIRST_BUCKET,
    OUTCOME_INDEX,
    PUSHED,
    RUNTIME,
    TALLY,
    Row,
    Tally,
    TallyHooks,
)
from kinetis_queue.outcomes import JobOutcome
from kinetis_queue.worker.background import BackgroundLoop

logger = logging.getLogger("kinetis_queue")

#: Seconds between two flushes of a process's counts.
FLUSH_EVERY: Final = 1.0
#: How long rows are kept.
KEEP_HOURS: Final = 24
#: The most rows kept: beyond, the oldest minutes are deleted (prune()). About 350 rows a minute for a
#: day; each row is one minute of one process, connection, queue and job name.
MAX_ROWS: Final = 500_000
#: Seconds between two deletions of expired rows by one process.
PRUNE_EVERY: Final = 600.0
#: The outcomes with a column of their own; the others are counted in "other".
_OWN_COLUMN: Final = (JobOutcome.SUCCEEDED, JobOutcome.RELEASED, JobOutcome.FAILED)
_OTHER: Final = tuple(OUTCOME_INDEX[outcome] for outcome in JobOutcome if outcome not in _OWN_COLUMN)


class Writer:
    """Writes one tally's minutes (a daemon thread, once a second; flush() to write now)."""

    def __init__(self, tally: Tally) -> None:
        self.tally = tally
        self._flush_lock = threading.Lock()
        self._loop: BackgroundLoop | None = None
        self._pruned = 0.0

    def start(self) -> None:
        """Start the thread (the tally calls this on its first count)."""
        self._loop = BackgroundLoop("history", self._step)
        self._loop.start()

    def _step(self) -> float:
        self.flush()
        return FLUSH_EVERY

    def flush(self) -> None:
        """Write what changed since the last flush; raises on a database error (the counts wait for the
        next one)."""
        with self._flush_lock:
            rows = self.tally.take()
            alias = router.db_for_write(HistoryMinute)
            try:
                if rows:
                    _upsert(alias, [self._record(row) for row in rows])
            except BaseException:
                self.tally.give_back(rows)
                raise
            now = time.time()
            if now - self._pruned >= PRUNE_EVERY:
                self._pruned = now
                prune(alias, now)

    def stop(self) -> None:
        """Stop the thread after a last flush (best effort: a worker stopping must not fail on it); the
        next count starts it again."""
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.stop()
        try:
            self.flush()
        except Exception as exc:
            logger.warning("History: the last flush failed: %s", type(exc).__name__)
        self.tally.flusher_stopped()

    def _record(self, row: Row) -> HistoryMinute:
        minute, (connection, queue, job), counts = row
        return HistoryMinute(
            minute=minute,
            source=self.tally.source,
            connection=connection,
            queue=queue,
            job=job,
            pushed=int(counts[PUSHED]),
            succeeded=int(counts[OUTCOME_INDEX[JobOutcome.SUCCEEDED]]),
            released=int(counts[OUTCOME_INDEX[JobOutcome.RELEASED]]),
            failed=int(counts[OUTCOME_INDEX[JobOutcome.FAILED]]),
            other=int(sum(counts[index] for index in _OTHER)),
            expired=int(counts[OUTCOME_INDEX[JobOutcome.EXPIRED]]),
            runtime=counts[RUNTIME],
            buckets=",".join(str(int(n)) for n in counts[FIRST_BUCKET:]),
        )


def prune(alias: str, now: float, *, max_rows: int | None = None) -> None:
    """Delete the rows older than KEEP_HOURS, then, beyond ``max_rows`` (MAX_ROWS), the oldest minutes
    until at most that many rows are left: the table stays bounded however many processes and names
    wrote to it. Whole minutes go, so a minute is never shown half counted."""
    rows = HistoryMinute.objects.using(alias)
    rows.filter(minute__lt=int(now // 60) - KEEP_HOURS * 60).delete()
    limit = MAX_ROWS if max_rows is None else max_rows
    beyond = list(rows.order_by("-minute").values_list("minute", flat=True)[limit : limit + 1])
    if beyond:
        rows.filter(minute__lte=beyond[0]).delete()


def _upsert(alias: str, rows: list[HistoryMinute]) -> None:
    """Insert the rows, or rewrite the counts of those there: ON CONFLICT (the key) on PostgreSQL and SQLite,
    ON DUPLICATE KEY on MySQL/MariaDB (which takes no conflict target)."""
    targeted = connections[alias].features.supports_update_conflicts_with_target
    HistoryMinute.objects.using(alias).bulk_create(
        rows,
        update_conflicts=True,
        unique_fields=["minute", "source", "connection", "queue", "job"] if targeted else None,
        update_fields=["pushed", "succeeded", "released", "failed", "other", "expired", "runtime", "buckets"],
    )


WRITER = Writer(TALLY)


def switch(on: bool) -> None:
    """HISTORY on or off (setup.push_side(), as the chain is read): whether the tally keeps its ended minutes and
    starts the writer."""
    TALLY.keep_minutes = on
    TALLY.flusher = WRITER.start if on else None


class HistoryHooks(TallyHooks):
    """The worker's side: its deliveries into the tally, and a last flush when it stops."""

    def stop(self) -> None:
        WRITER.stop()


# -- reading ------------------------------------------------------------------------------------


@dataclass
class Counts:
    """Summed counts: of one minute (``series()``), one queue (``totals()``) or one job class (``slowest()``)."""

    pushed: int = 0
    succeeded: int = 0
    released: int = 0
    failed: int = 0
    other: int = 0
    #: Of ``other``: jobs that expired unstarted.
    expired: int = 0
    runtime: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS) + 1))

    @property
    def deliveries(self) -> int:
        return self.succeeded + self.released + self.failed + self.other

    def columns(self) -> tuple[int, ...]:
        """pushed, succeeded, released, failed, other: the tables' columns."""
        return self.pushed, self.succeeded, self.released, self.failed, self.other

    def add(self, row: HistoryMinute) -> None:
        self.pushed += row.pushed
        self.succeeded += row.succeeded
        self.released += row.released
        self.failed += row.failed
        self.other += row.other
        self.expired += row.expired
        self.runtime += row.runtime
        for index, n in enumerate(row.buckets.split(",")[: len(self.buckets)]):
            self.buckets[index] += int(n)

    def quantile(self, q: float) -> float | None:
        """The run time below which ``q`` of the deliveries fall, interpolated within its bucket (as
        Prometheus' histogram_quantile); the last bound for those beyond it; None without deliveries."""
        total = sum(self.buckets)
        if total == 0:
            return None
        rank, seen = q * total, 0
        for index, n in enumerate(self.buckets):
            if n and seen + n >= rank:
                if index == len(BUCKETS):
                    return BUCKETS[-1]
                low = BUCKETS[index - 1] if index else 0.0
                return low + (BUCKETS[index] - low) * (rank - seen) / n
            seen += n
        return BUCKETS[-1]  # pragma: no cover - the loop reaches the rank: it is at most the total

    def as_dict(self) -> dict[str, float | int | None]:
        mean = self.runtime / self.deliveries if self.deliveries else None
        return {
            "pushed": self.pushed,
            "succeeded": self.succeeded,
            "released": self.released,
            "failed": self.failed,
            "other": self.other,
            "expired": self.expired,
            "mean": mean,
            "p50": self.quantile(0.5),
            "p95": self.quantile(0.95),
        }


def _rows(connection: str | None, minutes: int, now: float | None) -> tuple[int, list[HistoryMinute]]:
    """The first minute of the window and its rows (the current minute is the window's last)."""
    last = int((time.time() if now is None else now) // 60)
    first = last - minutes + 1
    rows = HistoryMinute.objects.using(router.db_for_read(HistoryMinute)).filter(minute__gte=first)
    if connection is not None:
        rows = rows.filter(connection=connection)
    return first, list(rows)


def series(connection: str | None = None, *, minutes: int = 60, now: float | None = None) -> list[tuple[int, Counts]]:
    """(Unix minute, counts) for each of the last ``minutes`` minutes, oldest first, idle minutes too."""
    first, rows = _rows(connection, minutes, now)
    found = {minute: Counts() for minute in range(first, first + minutes)}
    for row in rows:
        if row.minute in found:
            found[row.minute].add(row)
    return list(found.items())


def totals(
    connection: str | None = None, *, minutes: int = 60, now: float | None = None
) -> dict[tuple[str, str], Counts]:
    """Counts per (connection, queue) over the last ``minutes`` minutes."""
    found: dict[tuple[str, str], Counts] = {}
    for row in _rows(connection, minutes, now)[1]:
        found.setdefault((row.connection, row.queue), Counts()).add(row)
    return dict(sorted(found.items()))


def slowest(
    connection: str | None = None, *, minutes: int = 60, limit: int = 10, now: float | None = None
) -> list[tuple[str, str, Counts]]:
    """(connection, job, counts) of the job classes with the highest p95 run time over the window."""
    found: dict[tuple[str, str], Counts] = {}
    for row in _rows(connection, minutes, now)[1]:
        found.setdefault((row.connection, row.job), Counts()).add(row)
    ranked = sorted(
        ((key, counts) for key, counts in found.items() if counts.deliveries),
        key=lambda item: (-(item[1].quantile(0.95) or 0.0), item[0]),
    )
    return [(connection, job, counts) for (connection, job), counts in ranked[:limit]]
