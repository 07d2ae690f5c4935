"""Concurrency slots in a Django database: the SQL backend's own database, or the default one for SQS,
RabbitMQ and the other backends (kinetis_queue.limits).

Each key has one row per slot number below its limit (created on first use with an insert that ignores
conflicts). Taking a slot locks a free row (lease ended) with ``FOR UPDATE SKIP LOCKED`` (PostgreSQL,
MariaDB 10.6+, MySQL 8) and writes the holder's token and lease end; SQLite, which serializes writers,
does it in one UPDATE picking the row in a subquery. Renewal and release
name the token, so a holder whose lease ended and was taken over writes nothing. Lease ends are on
the worker's clock, as the SQL backend's reservations are.
"""

from __future__ import annotations

import time
from typing import Final

from django.db import OperationalError, connections, router
from django.db.models import Subquery

from kinetis_queue.contracts import Queue
from kinetis_queue.db.tables import store_databases
from kinetis_queue.db.transactions import write_atomic
from kinetis_queue.limits.models import LimitSlot
from kinetis_queue.limits.store import Slot, SlotStore

#: Attempts of a take whose transaction the database rolled back (a deadlock creating a key's rows,
#: SQLite's busy database).
RETRIES: Final = 5


class DatabaseSlots(SlotStore):
    """Slots in database ``alias``: see the module docstring."""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def acquire(self, key: str, limit: int, token: str, lease: float) -> Slot | None:
        for attempt in range(1, RETRIES + 1):  # pragma: no branch - the last attempt returns or raises
            try:
                with write_atomic(self.alias):
                    return self._take(key, limit, token, lease)
            except OperationalError:
                if attempt == RETRIES:
                    raise
                time.sleep(0.005 * attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _take(self, key: str, limit: int, token: str, lease: float) -> Slot | None:
        """A slot, or None when every slot is held."""
        rows = LimitSlot.objects.using(self.alias)
        until = time.time() + lease
        number = self._take_free(key, limit, token, until)
        if number is None:
            if rows.filter(slot_key=key, slot__lt=limit).count() >= limit:
                return None
            rows.bulk_create(
                [LimitSlot(slot_key=key, slot=n, holder="", expires_at=0) for n in range(limit)], ignore_conflicts=True
            )
            number = self._take_free(key, limit, token, until)
            if number is None:
                return None
        return Slot(key, number, token)

    def _take_free(self, key: str, limit: int, token: str, until: float) -> int | None:
        """Write ``token`` into the first free row of ``key``; its slot number, or None when none is free.

        SQLite: one UPDATE whose subquery picks the row, so the transaction's first statement takes the
        write lock (a read first would make two takers deadlock upgrading theirs). Elsewhere: lock a free
        row, skipping those other takers hold, then update it by primary key.
        """
        rows = LimitSlot.objects.using(self.alias)
        free = rows.filter(slot_key=key, slot__lt=limit, expires_at__lt=time.time()).order_by("slot")
        if connections[self.alias].vendor == "sqlite":
            if not rows.filter(pk=Subquery(free.values("pk")[:1])).update(holder=token, expires_at=until):
                return None
            return int(rows.filter(slot_key=key, holder=token).values_list("slot", flat=True)[0])
        row = free.select_for_update(skip_locked=True).first()
        if row is None:
            return None
        rows.filter(pk=row.pk).update(holder=token, expires_at=until)
        return int(row.slot)

    def renew(self, slot: Slot, lease: float) -> None:
        rows = LimitSlot.objects.using(self.alias)
        rows.filter(slot_key=slot.key, slot=slot.number, holder=slot.token).update(expires_at=time.time() + lease)

    def release(self, slot: Slot) -> None:
        rows = LimitSlot.objects.using(self.alias)
        rows.filter(slot_key=slot.key, slot=slot.number, holder=slot.token).update(holder="", expires_at=0)


#: A slot row free for this long (seconds) is pruned by ``queue_prune`` (its key is recreated on next use).
IDLE_FOR: Final = 86_400


def prune(now: float | None = None) -> int:
    """Delete the slot rows free for IDLE_FOR seconds, in every database that holds some (``queue_prune``)."""

    cutoff = (time.time() if now is None else now) - IDLE_FOR
    return sum(
        LimitSlot.objects.using(alias).filter(holder="", expires_at__lt=cutoff).delete()[0]
        for alias in store_databases(LimitSlot)
    )


_STORES: dict[str, DatabaseSlots] = {}


def database_slots(queue: Queue) -> SlotStore:
    """The slot store of backends without one of their own (limits.slot_store_of): slots in the connection's
    own database (SQL backend) or the one ``router.db_for_write(LimitSlot)`` names; one per database and process."""
    alias = queue.jobs_database() or router.db_for_write(LimitSlot)
    store = _STORES.get(alias)
    if store is None:
        store = _STORES[alias] = DatabaseSlots(alias)
    return store
