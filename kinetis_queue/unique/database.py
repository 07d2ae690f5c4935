"""Unique jobs' locks in the Django database, for the backends whose store cannot hold them with the job
(SQS, RabbitMQ, sync, custom backends; kinetis_queue.unique).

The lock and the push cannot share a transaction, so the order is: take the key (a row written
``confirmed=False`` and committed), push, confirm it. What each fault leaves:

- a push that fails gives the key back (its row is deleted), and the error propagates;
- a pusher killed between taking the key and confirming it leaves an unconfirmed row: another push of
  the key waits for it (polling) up to PUSH_GRACE seconds from when it was taken, then takes the key
  over and pushes. No job is lost; if the killed push had reached the store, the job is there twice;
- the worker deletes the row when the holder starts (``"started"``) or just before it is acked or
  failed for good (``"settled"``): a crash between the delete and the settlement leaves a duplicate
  possible, never a key held by a finished job.

Debounce: the store cannot take a waiting message back, so a debounced push supersedes it: the newest
push is stored under the holder's id with the next ``generation``, and a delivery of an older
generation is skipped by the worker (acked without running).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, replace
from typing import Final

from django.db import IntegrityError, OperationalError, connections, router, transaction

from kinetis_queue.contracts import PreparedPush, Queue, QueuedJob
from kinetis_queue.db.tables import store_databases
from kinetis_queue.exceptions import DuplicateJobError
from kinetis_queue.unique.models import UniqueLockRecord
from kinetis_queue.unique.store import METADATA_KEY, HeldLock, LockStore, UniqueLock, Until, without_lock

#: Seconds an unconfirmed key (its push in flight) holds off other pushes before they take it over:
#: well above a push's worst latency, so only a dead pusher's key is taken.
PUSH_GRACE: Final = 30.0
#: How long a push waits between two looks at an unconfirmed key (seconds; doubled up to WAIT_MAX).
WAIT_FIRST: Final = 0.005
WAIT_MAX: Final = 0.1
#: Attempts of a push whose transaction the database rolled back (a deadlock, SQLite's busy database).
RETRIES: Final = 10


@dataclass(frozen=True, slots=True)
class _Decision:
    """What a push does once it looked at the key: push (as ``job_id``, ``generation``), wait, or give way."""

    action: str  # "push", "wait" or "held"
    job_id: str
    generation: int = 0


class DatabaseLocks(LockStore):
    """Locks in the Django database that ``router.db_for_write(UniqueLockRecord)`` names."""

    def __init__(self, alias: str | None = None) -> None:
        self.alias = alias or router.db_for_write(UniqueLockRecord)
        self.database = self.alias

    def push(self, queue: Queue, prepared: PreparedPush, lock: UniqueLock) -> str:
        owner = uuid.uuid4().hex
        pause = WAIT_FIRST
        while True:
            decision = self._decide(prepared, lock, owner)
            if decision.action == "held":
                if lock.raise_duplicate:
                    raise DuplicateJobError(decision.job_id)
                return decision.job_id
            if decision.action == "push":
                return self._push(queue, prepared, lock, owner, decision)
            time.sleep(pause)
            pause = min(pause * 2, WAIT_MAX)

    def _decide(self, prepared: PreparedPush, lock: UniqueLock, owner: str) -> _Decision:
        for attempt in range(1, RETRIES + 1):  # pragma: no branch - the last attempt returns or raises
            outer = connections[self.alias].in_atomic_block
            try:
                with transaction.atomic(using=self.alias):
                    return self._decide_locked(prepared, lock, owner, time.time())
            except OperationalError:  # MariaDB's deadlock, SQLite's busy database: rolled back whole
                if outer or attempt == RETRIES:
                    raise
                time.sleep(WAIT_FIRST * attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _decide_locked(self, prepared: PreparedPush, lock: UniqueLock, owner: str, now: float) -> _Decision:
        rows = UniqueLockRecord.objects.using(self.alias)
        taken = {
            "job_id": prepared.id,
            "until": lock.until.value,
            "generation": 0,
            "expires_at": now + lock.seconds,
            "claimed_at": now,
            "confirmed": False,
            "owner": owner,
        }
        row = rows.select_for_update().filter(lock_key=lock.key).first()
        if row is None:
            try:
                with transaction.atomic(using=self.alias):  # a savepoint: a concurrent taker's row wins
                    rows.create(lock_key=lock.key, job_row=None, **taken)
            except IntegrityError:
                return _Decision("wait", "")
            return _Decision("push", prepared.id)
        if row.expires_at <= now or (not row.confirmed and row.claimed_at + PUSH_GRACE <= now):
            rows.filter(pk=row.pk).update(**taken)  # expired, or its pusher died: taken over
            return _Decision("push", prepared.id)
        if not row.confirmed:
            return _Decision("wait", row.job_id)
        if lock.debounce and row.until == Until.STARTED:
            generation = row.generation + 1
            rows.filter(pk=row.pk).update(**{**taken, "job_id": row.job_id, "generation": generation})
            return _Decision("push", row.job_id, generation)
        return _Decision("held", row.job_id)

    def _push(self, queue: Queue, prepared: PreparedPush, lock: UniqueLock, owner: str, decision: _Decision) -> str:
        # The lock's metadata names this store's database (the worker releases it there); superseding the
        # waiting holder, the push also takes the holder's id and the next generation.
        held = replace(lock, generation=decision.generation)
        metadata = {**prepared.envelope.metadata, METADATA_KEY: {**held.metadata(), "db": self.alias}}
        prepared = replace(prepared, envelope=replace(prepared.envelope, id=decision.job_id, metadata=metadata))
        mine = UniqueLockRecord.objects.using(self.alias).filter(lock_key=lock.key, owner=owner)
        if queue.runs_inline:
            # The sync backend runs the job inside the push: the key is held (confirmed) while it
            # runs, so a push from inside the job gives way, and freed after unless it lasts its time.
            mine.update(confirmed=True)
            try:
                queue.send(without_lock(prepared))
            finally:
                if lock.until is not Until.EXPIRED:
                    mine.delete()
            return decision.job_id
        try:
            queue.send(without_lock(prepared))  # the plain push; the key is this push's now
        except BaseException:
            mine.delete()  # give the key back: the next push takes it at once
            raise
        mine.update(confirmed=True)
        return decision.job_id

    def started(self, queue: Queue, job: QueuedJob, lock: HeldLock) -> bool:
        if lock.until is not Until.STARTED:
            return True
        rows = UniqueLockRecord.objects.using(self.alias).filter(lock_key=lock.key, job_id=job.id)
        if rows.filter(generation=lock.generation).delete()[0] or not lock.debounce:
            return True
        # Not this generation's key: superseded by a debounced push (skip), or expired and taken (run).
        return not rows.filter(generation__gt=lock.generation).exists()

    def settled(self, queue: Queue, job: QueuedJob, lock: HeldLock) -> None:
        rows = UniqueLockRecord.objects.using(self.alias)
        rows.filter(lock_key=lock.key, job_id=job.id, generation=lock.generation).delete()


def prune(now: float | None = None) -> int:
    """Delete the lock rows whose key has expired, in every database that holds some (``queue_prune``)."""

    cutoff = time.time() if now is None else now
    return sum(
        UniqueLockRecord.objects.using(alias).filter(expires_at__lt=cutoff).delete()[0]
        for alias in store_databases(UniqueLockRecord)
    )


def database_locks(database: str | None) -> LockStore:
    """The lock store of backends without one of their own (unique.database_lock_store): the store in
    ``database`` (None: the router's), one per process."""
    alias = database or router.db_for_write(UniqueLockRecord)
    store = _STORES.get(alias)
    if store is None:
        store = _STORES[alias] = DatabaseLocks(alias)
    return store


_STORES: dict[str, DatabaseLocks] = {}
