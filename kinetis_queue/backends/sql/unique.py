"""Unique jobs on the SQL backend: the lock row and the job row in one transaction (kinetis_queue.unique).

The lock row (``kinetis_queue_unique_locks``, in the connection's own database) names the holder's
job row. Whether the key is still held is read from that row when a push meets the lock, so the
worker releases nothing and no crash can leave a key held by a job that is gone:

- ``"settled"``: held while the holder's row exists (an ack or a final failure deletes it);
- ``"started"``: held while the row exists and its first attempt has not begun (no reservation, no
  attempt counted);
- ``"expired"``: held until ``expires_at``, which bounds the other two as well.

Taking the key: PostgreSQL and SQLite insert the lock row ``ON CONFLICT DO NOTHING`` (PostgreSQL
waits for a concurrent taker's transaction, SQLite's insert takes the database's write lock), then
lock the existing row with ``FOR UPDATE``; MariaDB and MySQL lock first (``SELECT ... FOR UPDATE``,
which also locks the gap of an absent key) and insert with ``INSERT IGNORE``. Two MariaDB pushes of a
key nobody holds yet can deadlock on that gap: the database rolls one back, and a push outside the
caller's own transaction is tried again (DEADLOCK_RETRIES).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Final

from django.db import DatabaseError, OperationalError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from kinetis_queue.backends.sql.tables import explain
from kinetis_queue.contracts import PreparedPush, Queue
from kinetis_queue.exceptions import DuplicateJobError
from kinetis_queue.payload.envelope import dumps
from kinetis_queue.unique.store import LockStore, UniqueLock, Until

if TYPE_CHECKING:
    from kinetis_queue.backends.sql.queue import SqlQueue

LOCKS_TABLE: Final = "kinetis_queue_unique_locks"
_COLUMNS = "lock_key, job_id, job_row, until, generation, expires_at, claimed_at, confirmed, owner"
INSERT_LOCK: Final = f"INSERT INTO kinetis_queue_unique_locks ({_COLUMNS}) VALUES (%s, %s, NULL, %s, 0, %s, %s, %s, '')"
#: PostgreSQL and SQLite: a key someone holds is left alone (PostgreSQL first waits for its taker's commit).
INSERT_LOCK_IF_FREE: Final = f"{INSERT_LOCK} ON CONFLICT (lock_key) DO NOTHING"
#: MariaDB and MySQL: after the locking read found no row.
INSERT_LOCK_IGNORE: Final = INSERT_LOCK.replace("INSERT INTO", "INSERT IGNORE INTO", 1)
SELECT_LOCK: Final = "SELECT job_id, job_row, until, expires_at FROM kinetis_queue_unique_locks WHERE lock_key = %s"
HOLDER: Final = "SELECT attempts, reserved_token FROM kinetis_queue_jobs WHERE id = %s"
#: The new holder's row, once inserted.
SET_ROW: Final = "UPDATE kinetis_queue_unique_locks SET job_row = %s WHERE lock_key = %s"
#: A key whose holder no longer holds it, taken over by the push's new job.
TAKE: Final = (
    "UPDATE kinetis_queue_unique_locks SET job_id = %s, job_row = %s, until = %s, generation = 0, "
    "expires_at = %s, claimed_at = %s WHERE lock_key = %s"
)
#: Debounce: the waiting holder gets the newest push's arguments and delay (fenced: not yet reserved).
REPLACE: Final = (
    "UPDATE kinetis_queue_jobs SET args = %s, metadata = %s, available_at = %s "
    "WHERE id = %s AND reserved_token IS NULL AND attempts = 0"
)
EXTEND: Final = "UPDATE kinetis_queue_unique_locks SET expires_at = %s, claimed_at = %s WHERE lock_key = %s"
#: Pushes outside a transaction of the caller's own try again this often after a MariaDB deadlock.
DEADLOCK_RETRIES: Final = 5
#: MySQL's and MariaDB's error number for a deadlock (the whole transaction was rolled back).
ER_LOCK_DEADLOCK: Final = 1213


class SqlLocks(LockStore):
    """The SQL backend's lock store: see the module docstring."""

    def __init__(self, queue: SqlQueue) -> None:
        self.queue = queue

    def push(self, queue: Queue, prepared: PreparedPush, lock: UniqueLock) -> str:
        alias = self.queue.database
        db = connections[alias]
        outer = db.in_atomic_block
        for attempt in range(1, DEADLOCK_RETRIES + 1):  # pragma: no branch - the last attempt returns or raises
            try:
                with transaction.atomic(using=alias, savepoint=False):
                    job_id, stored = self._push_locked(db, prepared, lock)
            except DatabaseError as exc:
                if not outer and attempt < DEADLOCK_RETRIES and _is_deadlock(exc):
                    continue
                # Anything else, a missing table included (SQLite reports it as an OperationalError too).
                clear = explain(alias, exc, LOCKS_TABLE)
                if clear is None:
                    raise
                raise clear from exc
            # Raised here, after the block: raising inside it would spoil a transaction of the caller's.
            if not stored and lock.raise_duplicate:
                raise DuplicateJobError(job_id)
            return job_id
        raise AssertionError("unreachable")  # pragma: no cover

    def _push_locked(self, db: BaseDatabaseWrapper, prepared: PreparedPush, lock: UniqueLock) -> tuple[str, bool]:
        """Inside the push's transaction: (the id push() returns, whether this push stored or replaced a job)."""
        now = time.time()
        with db.cursor() as cursor:
            found = _take_or_lock(db, cursor, prepared, lock, now)
            if found is None:  # the key was free: this push holds it
                cursor.execute(SET_ROW, [self.queue.insert_row(db, cursor, prepared), lock.key])
                return prepared.id, True
            holder_id, holder_row, until, expires_at = found
            state = _holder_state(cursor, holder_row)
            held = expires_at > now and (
                until == Until.EXPIRED or (state != "gone" and (until == Until.SETTLED or state == "waiting"))
            )
            if held and lock.debounce and state == "waiting":
                envelope = prepared.envelope
                cursor.execute(
                    REPLACE, [dumps(envelope.args), dumps(envelope.metadata), now + prepared.delay, holder_row]
                )
                if cursor.rowcount == 1:
                    cursor.execute(EXTEND, [now + lock.seconds, now, lock.key])
                    return holder_id, True
                # A worker reserved it meanwhile: it has started, so the newest push is queued anew.
            elif held:
                return holder_id, False
            job_row = self.queue.insert_row(db, cursor, prepared)
            cursor.execute(TAKE, [prepared.id, job_row, lock.until.value, now + lock.seconds, now, lock.key])
            return prepared.id, True


def _take_or_lock(
    db: BaseDatabaseWrapper, cursor: CursorWrapper, prepared: PreparedPush, lock: UniqueLock, now: float
) -> tuple[Any, ...] | None:
    """Insert the lock row if the key has none (None: this push took it); else the existing row
    (job_id, job_row, until, expires_at), locked until the transaction ends."""
    values = [lock.key, prepared.id, lock.until.value, now + lock.seconds, now, True]
    locking = SELECT_LOCK if db.vendor == "sqlite" else f"{SELECT_LOCK} FOR UPDATE"  # SQLite: its write lock is held
    while True:  # a row pruned between the two statements: the key is free again
        found: tuple[Any, ...] | None
        if db.vendor == "mysql":
            cursor.execute(locking, [lock.key])
            found = cursor.fetchone()
            if found is not None:
                return found
            cursor.execute(INSERT_LOCK_IGNORE, values)
        else:
            cursor.execute(INSERT_LOCK_IF_FREE, values)
        if cursor.rowcount == 1:
            return None
        cursor.execute(locking, [lock.key])
        found = cursor.fetchone()
        if found is not None:
            return found


def _holder_state(cursor: CursorWrapper, job_row: int | None) -> str:
    """ "gone" (no row: acked, failed for good or cleared), "waiting" (never reserved) or "started"."""
    if job_row is None:
        return "gone"
    cursor.execute(HOLDER, [job_row])
    found = cursor.fetchone()
    if found is None:
        return "gone"
    attempts, token = found
    return "waiting" if attempts == 0 and token is None else "started"


def _is_deadlock(exc: DatabaseError) -> bool:
    """Whether the database rolled the push's transaction back for a deadlock (MySQL's and MariaDB's 1213)."""
    if not isinstance(exc, OperationalError):
        return False
    args: tuple[Any, ...] = getattr(exc.__cause__, "args", ())
    return bool(args) and args[0] == ER_LOCK_DEADLOCK
