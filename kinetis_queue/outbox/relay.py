"""The outbox relay: moves a connection's committed outbox rows to its store, at least once.

For each queue with rows, in one transaction of the outbox database: lock up to BATCH of its oldest
rows (``FOR UPDATE SKIP LOCKED``), check that the oldest is the queue's head (else another relay is
sending that queue: leave it, so each queue is sent in ``id`` order by one relay at a time), send them
with ``Queue.store_many()`` (one round trip where the store allows, confirmed by the store), delete
them, commit. A relay killed before its commit leaves the rows to the next relay, which sends them
again: the documented duplicate (the job keeps its id; Redis recognises a resend, see
RedisQueue.store_many). A row is never deleted before the store confirmed it.

SQLite has no SKIP LOCKED: the relay takes the database's write lock first (``BEGIN IMMEDIATE``), so
one relay sends at a time, and pushes wait meanwhile (a batch's round trip): fine for development.

Waiting: on PostgreSQL an idle relay LISTENs on the connection's channel, which every outbox write
NOTIFYs at commit, so a committed row is relayed at once; elsewhere it polls every OUTBOX_POLL, and so it
does behind a transaction pooler, where a LISTEN outlives no transaction (kinetis_queue/backends/sql/pooling.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any, Final

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.utils import load_backend

from kinetis_queue import crashpoints
from kinetis_queue.backends.sql.pooling import transaction_pooled
from kinetis_queue.conf import OutboxSettings
from kinetis_queue.contracts import PreparedPush, Queue
from kinetis_queue.envelope import decode_envelope
from kinetis_queue.exceptions import MalformedQueuedJobDataError
from kinetis_queue.outbox.database import OUTBOX_TABLE, channel

logger = logging.getLogger("kinetis_queue.outbox")

#: Most rows one relay transaction sends, unless the store asks for fewer (``Queue.relay_batch``).
BATCH: Final = 500
#: The longest an idle relay waits before looking again even when woken by nothing (seconds).
MAX_IDLE: Final = 1.0
#: The pause after a failed round (the store or the database is down), in seconds.
FAILURE_PAUSE: Final = 1.0
#: Crash points of the fault tests (kinetis_queue/crashpoints.py).
AFTER_SEND: Final = "outbox.sent"
AFTER_DELETE: Final = "outbox.deleted"

QUEUES: Final = f"SELECT DISTINCT queue FROM {OUTBOX_TABLE} WHERE connection = %s"
CLAIM: Final = (
    f"SELECT id, queue, envelope, due_at FROM {OUTBOX_TABLE} WHERE connection = %s AND queue = %s ORDER BY id LIMIT %s"
)
HEAD: Final = f"SELECT MIN(id) FROM {OUTBOX_TABLE} WHERE connection = %s AND queue = %s"
BACKLOG: Final = f"SELECT COUNT(*), MIN(pushed_at) FROM {OUTBOX_TABLE} WHERE connection = %s"


class Relay:
    """Relays one connection's outbox rows to ``queue``'s store; one loop calls it (thread-unsafe)."""

    def __init__(self, queue: Queue, settings: OutboxSettings, *, batch: int | None = None) -> None:
        if queue.connection is None:
            raise ValueError("a relay needs a queue built for a named connection")
        self.queue = queue
        self.connection = queue.connection
        self.settings = settings
        self.batch = min(BATCH, queue.relay_batch) if batch is None else batch
        self.relayed = 0
        self._listener: BaseDatabaseWrapper | None = None

    @property
    def database(self) -> str:
        return self.settings.database

    def relay_once(self) -> int:
        """Send every committed row this relay can take now; how many it sent."""
        db = connections[self.database]
        with db.cursor() as cursor:
            cursor.execute(QUEUES, [self.connection])
            names = [row[0] for row in cursor.fetchall()]
        sent = 0
        for name in names:
            sent += self._relay_queue(db, name)
        self.relayed += sent
        return sent

    def step(self) -> float:
        """One round for a loop: relay, and when nothing was waiting, wait to be woken; 0 to go on at once."""
        try:
            if self.relay_once():
                return 0.0
            self._wait(MAX_IDLE)
        except Exception as exc:
            logger.error(
                "The outbox relay of connection %r failed (%s: %s); trying again in %gs",
                self.connection,
                type(exc).__name__,
                exc,
                FAILURE_PAUSE,
            )
            self._drop_listener()
            return FAILURE_PAUSE
        return 0.0

    def close(self) -> None:
        self._drop_listener()

    # -- one queue ------------------------------------------------------------------------------

    def _relay_queue(self, db: BaseDatabaseWrapper, name: str) -> int:
        sent = 0
        while True:
            count = self._relay_batch(db, name)
            sent += count
            if count < self.batch:
                return sent

    def _relay_batch(self, db: BaseDatabaseWrapper, name: str) -> int:
        """One transaction: lock the queue's oldest rows, send them, delete them; how many were sent."""
        if db.vendor == "sqlite":
            return self._relay_batch_sqlite(db, name)
        with transaction.atomic(using=self.database), db.cursor() as cursor:
            cursor.execute(f"{CLAIM} FOR UPDATE SKIP LOCKED", [self.connection, name, self.batch])
            rows = cursor.fetchall()
            if not rows:
                return 0
            cursor.execute(HEAD, [self.connection, name])
            if cursor.fetchone()[0] != rows[0][0]:
                return 0  # another relay holds this queue's head: it sends them, in order
            self._send_and_delete(cursor, rows)
        crashpoints.reach(AFTER_DELETE)
        return len(rows)

    def _relay_batch_sqlite(self, db: BaseDatabaseWrapper, name: str) -> int:
        db.ensure_connection()
        with db.cursor() as cursor:
            cursor.execute("BEGIN IMMEDIATE")
            try:
                cursor.execute(CLAIM, [self.connection, name, self.batch])
                rows = cursor.fetchall()
                if rows:
                    self._send_and_delete(cursor, rows)
            except BaseException:
                cursor.execute("ROLLBACK")
                raise
            cursor.execute("COMMIT")
        if rows:
            crashpoints.reach(AFTER_DELETE)
        return len(rows)

    def _send_and_delete(self, cursor: Any, rows: Sequence[tuple[Any, ...]]) -> None:
        """Send the rows (the store confirms), then delete them, all in the caller's transaction."""
        now = time.time()
        prepared: list[PreparedPush] = []
        for row_id, name, text, due_at in rows:
            try:
                envelope = decode_envelope(text)
            except MalformedQueuedJobDataError as exc:
                logger.error(
                    "Outbox row %s of connection %r is malformed and is removed: %s", row_id, self.connection, exc
                )
                continue
            prepared.append(PreparedPush(envelope, max(0.0, float(due_at) - now), name))
        self.queue.store_many(prepared)
        crashpoints.reach(AFTER_SEND)
        marks = ", ".join(["%s"] * len(rows))
        cursor.execute(f"DELETE FROM {OUTBOX_TABLE} WHERE id IN ({marks})", [row[0] for row in rows])

    # -- waiting ----------------------------------------------------------------------------------

    def _wait(self, seconds: float) -> None:
        """Until a NOTIFY of this connection's channel (PostgreSQL) or OUTBOX_POLL (elsewhere, and pooled)."""
        if connections[self.database].vendor != "postgresql" or transaction_pooled(self.database):
            time.sleep(min(seconds, self.settings.poll))
            return
        listener = self._listen()
        for _ in listener.connection.notifies(timeout=seconds, stop_after=1):
            pass

    def _listen(self) -> BaseDatabaseWrapper:
        """The relay's own LISTEN connection (PostgreSQL), opened on first use and kept.

        Notifications that arrive while the relay sends are kept by the client and end the next wait
        at once; a row committed between the empty round and the first LISTEN is found by the next
        round, at most MAX_IDLE later.
        """
        if self._listener is None or self._listener.connection is None:
            shared = connections[self.database]
            db: BaseDatabaseWrapper = load_backend(shared.settings_dict["ENGINE"]).DatabaseWrapper(
                {**shared.settings_dict, "CONN_MAX_AGE": None, "CONN_HEALTH_CHECKS": False}, self.database
            )
            with db.wrap_database_errors:
                db.connect()
            db.connection.autocommit = True
            db.connection.execute(f'LISTEN "{channel(self.connection)}"')
            self._listener = db
        return self._listener

    def _drop_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.close()
            # Best effort. Django's close() raises only for a wrapper used from a thread other than its own (the
            # relay's one loop never does that), and psycopg's close() of a broken connection does not raise.
            except Exception:  # noqa: S110  # pragma: no cover - see above
                pass


def backlog(connection: str, settings: OutboxSettings) -> tuple[int, float | None]:
    """(rows waiting in the connection's outbox, when the oldest was pushed or None): queue_status, W005."""
    with connections[settings.database].cursor() as cursor:
        cursor.execute(BACKLOG, [connection])
        count, oldest = cursor.fetchone()
    return int(count), None if oldest is None else float(oldest)
