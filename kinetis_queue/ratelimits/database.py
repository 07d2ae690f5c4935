"""Rate limits in a Django database: the store of every backend without one of its own (SQL, SQS, RabbitMQ, sync
and custom backends; kinetis_queue.ratelimits).

Each take is one short transaction on the key's rows (``write_atomic``: SQLite takes its write lock at BEGIN;
elsewhere the rows are locked with SELECT ... FOR UPDATE), so takers of one key queue behind each other and never
count the same row twice. A sliding window keeps ``limit`` rows, each the time of one start: a start takes the
oldest row if it is ``per`` seconds old, else it waits until then. A token bucket keeps one row, its theoretical
arrival time (GCRA): a start is allowed while that time is at most ``(burst - 1) * interval`` ahead of now.
Times come from the worker's clock: workers whose clocks differ by S seconds may start up to S seconds early
against each other (docs/rate-limits.md, "Accuracy").
"""

from __future__ import annotations

import time
from typing import Final

from django.db import OperationalError, router

from kinetis_queue.contracts import Queue
from kinetis_queue.db.tables import store_databases
from kinetis_queue.db.transactions import write_atomic
from kinetis_queue.ratelimits.models import RateSlot
from kinetis_queue.ratelimits.store import WINDOW, RateLimit, RateStore

#: Attempts of a take whose transaction the database rolled back (a deadlock creating a key's rows, SQLite's
#: busy database).
RETRIES: Final = 5


class DatabaseRates(RateStore):
    """Rate slots in database ``alias``: see the module docstring."""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def take(self, digest: str, limit: RateLimit, token: str) -> float:
        for attempt in range(1, RETRIES + 1):  # pragma: no branch - the last attempt returns or raises
            try:
                with write_atomic(self.alias):
                    if limit.algorithm == WINDOW:
                        return self._window(digest, limit)
                    return self._bucket(digest, limit)
            except OperationalError:
                if attempt == RETRIES:
                    raise
                time.sleep(0.005 * attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _rows(self, digest: str, count: int) -> list[RateSlot]:
        """The key's first ``count`` rows, locked for this transaction (created at time 0 when missing)."""
        rows = RateSlot.objects.using(self.alias).filter(rate_key=digest, slot__lt=count)
        found = list(rows.select_for_update().order_by("slot"))
        if len(found) < count:
            RateSlot.objects.using(self.alias).bulk_create(
                [RateSlot(rate_key=digest, slot=n, at=0) for n in range(count)], ignore_conflicts=True
            )
            found = list(rows.select_for_update().order_by("slot"))
        return found

    def _window(self, digest: str, limit: RateLimit) -> float:
        rows = self._rows(digest, limit.limit)
        now = time.time()  # read once the rows are locked: a start is stamped no earlier than it is counted
        oldest = min(rows, key=lambda row: row.at)
        if oldest.at > now - limit.per:
            return oldest.at + limit.per - now
        RateSlot.objects.using(self.alias).filter(pk=oldest.pk).update(at=now)
        return 0.0

    def _bucket(self, digest: str, limit: RateLimit) -> float:
        [row] = self._rows(digest, 1)
        now = time.time()  # read once the row is locked, as the window's
        arrival = max(row.at, now)
        ahead = arrival - now - (limit.capacity - 1) * limit.interval
        if ahead > 0:
            return ahead
        RateSlot.objects.using(self.alias).filter(pk=row.pk).update(at=arrival + limit.interval)
        return 0.0


#: A row untouched for this long past its time (seconds) is pruned by ``queue_prune`` (its key is recreated on
#: next use).
IDLE_FOR: Final = 86_400


def prune(now: float | None = None) -> int:
    """Delete the rate rows idle for IDLE_FOR seconds, in every database that holds some (``queue_prune``)."""
    cutoff = (time.time() if now is None else now) - IDLE_FOR
    return sum(RateSlot.objects.using(alias).filter(at__lt=cutoff).delete()[0] for alias in store_databases(RateSlot))


_STORES: dict[str, DatabaseRates] = {}


def database_rates(queue: Queue) -> RateStore:
    """The rate store of backends without one of their own (ratelimits.rate_store_of): rows in the connection's own
    database (SQL backend) or the one ``router.db_for_write(RateSlot)`` names; one per database and process."""
    alias = queue.jobs_database() or router.db_for_write(RateSlot)
    store = _STORES.get(alias)
    if store is None:
        store = _STORES[alias] = DatabaseRates(alias)
    return store
