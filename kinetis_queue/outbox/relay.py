"""The outbox relay: moves a connection's committed outbox rows to its store, at least once.

For each queue with rows, in one transaction of the outbox database: lock up to BATCH of its oldest
rows (``FOR UPDATE SKIP LOCKED``), check that the oldest is the queue's head (else another relay is
sending that queue: leave it, so each queue is sent in ``id`` order by one relay at a time), send them
with ``Queue.store_many()`` (one round trip where the store allows, confirmed by the store), delete
them, commit. A relay killed before its commit leaves the rows to the next relay, which sends them
again: the documented duplicate (the job keeps its id; Redis recognises a resend, see
RedisQueue.store_many). A row is never deleted before the store confirmed it.

Queues are relayed one by one, starting one further each round, and a queue whose store fails never
holds another. What the store does not take is classified by the backend (``Queue.store_many()``'s
StoreRefusal): a transport error or an unknown outcome leaves the row to be sent again (the loop leaves
that queue alone for FAILURE_PAUSE); a refusal for good (no such queue, too large, an argument the store
rejects) becomes a failed-job record with the reason (OutboxRefusedError, written as the worker writes
one) and the row is deleted; the rows the store took beside them are deleted, never sent again.

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
from kinetis_queue.contracts import PreparedPush, Queue, QueuedJob, StoreRefusal
from kinetis_queue.exceptions import MalformedQueuedJobDataError, OutboxRefusedError
from kinetis_queue.failed import ModelRecorder, exception_class_path, exception_text
from kinetis_queue.outbox.database import OUTBOX_TABLE, channel
from kinetis_queue.payload.envelope import decode_envelope
from kinetis_queue.unique import database_lock_store, free_key

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
#: Records a row the store refused for good, as the worker records a job it gives up on.
RECORDER: Final = ModelRecorder()
#: The exception class of those records (queue_status and the dashboard count them).
REFUSED_CLASS: Final = exception_class_path(OutboxRefusedError())


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
        #: Rows the store refused for good, recorded as failed jobs and removed (since the relay began).
        self.refused = 0
        #: The queues whose send failed in the last round (their rows stay, sent again next time).
        self.failing: list[str] = []
        self._listener: BaseDatabaseWrapper | None = None
        self._turn = 0
        #: Queues whose send failed, and when step() may try each again (time.monotonic()).
        self._held: dict[str, float] = {}
        #: The jobs refused for good in the transaction in flight: their unique keys are freed after its commit.
        self._refused_jobs: list[QueuedJob] = []

    @property
    def database(self) -> str:
        return self.settings.database

    def relay_once(self) -> int:
        """Send every committed row this relay can take now, queue by queue; how many it sent.

        A queue whose store fails (a transport error, an unknown outcome) is logged and named in
        ``failing``, its rows kept for the next round; it never stops the other queues.
        """
        return self._round(hold=False)

    def step(self) -> float:
        """One round for a loop: relay, and when nothing was waiting, wait to be woken; 0 to go on at once.

        A queue whose send failed is left alone for FAILURE_PAUSE, while the others are relayed.
        """
        try:
            if self._round(hold=True):
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

    def _round(self, *, hold: bool) -> int:
        """Each queue with rows in turn, starting one further each round, so that no queue always waits
        behind another; with ``hold``, a queue whose send failed less than FAILURE_PAUSE ago is skipped."""
        db = connections[self.database]
        with db.cursor() as cursor:
            cursor.execute(QUEUES, [self.connection])
            names = [row[0] for row in cursor.fetchall()]
        if len(names) > 1:
            self._turn += 1
            start = self._turn % len(names)
            names = names[start:] + names[:start]
        held = self._held
        now = time.monotonic() if held else 0.0
        failing: list[str] = []
        sent = 0
        for name in names:
            if held:
                if hold and held.get(name, 0.0) > now:
                    failing.append(name)
                    continue
                held.pop(name, None)
            try:
                sent += self._relay_queue(db, name)
            except _SendFailed as failed:
                sent += failed.sent
                failing.append(name)
                held[name] = time.monotonic() + FAILURE_PAUSE
                logger.error(
                    "The outbox relay of connection %r could not send queue %r (%s: %s); its rows stay in the "
                    "outbox and are sent again in %gs, the other queues go on",
                    self.connection,
                    name,
                    type(failed.error).__name__,
                    exception_text(failed.error),
                    FAILURE_PAUSE,
                )
        self.failing = failing
        self.relayed += sent
        return sent

    # -- one queue ------------------------------------------------------------------------------

    def _relay_queue(self, db: BaseDatabaseWrapper, name: str) -> int:
        sent = 0
        while True:
            try:
                claimed, stored = self._relay_batch(db, name)
            except _SendFailed as failed:
                failed.sent += sent
                raise
            sent += stored
            if claimed < self.batch:
                return sent

    def _relay_batch(self, db: BaseDatabaseWrapper, name: str) -> tuple[int, int]:
        """One transaction: lock the queue's oldest rows, send them, delete them; (rows claimed, rows sent).

        Raises _SendFailed when the store did not take some of them (after the commit that deleted
        the others), so the queue's loop stops there.
        """
        if db.vendor == "sqlite":
            return self._relay_batch_sqlite(db, name)
        with transaction.atomic(using=self.database), db.cursor() as cursor:
            cursor.execute(f"{CLAIM} FOR UPDATE SKIP LOCKED", [self.connection, name, self.batch])
            rows = cursor.fetchall()
            if not rows:
                return 0, 0
            cursor.execute(HEAD, [self.connection, name])
            if cursor.fetchone()[0] != rows[0][0]:
                return 0, 0  # another relay holds this queue's head: it sends them, in order
            sent, kept = self._send_and_delete(cursor, rows)
        crashpoints.reach(AFTER_DELETE)
        if self._refused_jobs:
            self._free_keys()
        if kept is not None:
            raise _SendFailed(kept.error, sent)
        return len(rows), sent

    def _relay_batch_sqlite(self, db: BaseDatabaseWrapper, name: str) -> tuple[int, int]:
        db.ensure_connection()
        sent, kept = 0, None
        with db.cursor() as cursor:
            cursor.execute("BEGIN IMMEDIATE")
            try:
                cursor.execute(CLAIM, [self.connection, name, self.batch])
                rows = cursor.fetchall()
                if rows:
                    sent, kept = self._send_and_delete(cursor, rows)
            except BaseException:
                cursor.execute("ROLLBACK")
                raise
            cursor.execute("COMMIT")
        if rows:
            crashpoints.reach(AFTER_DELETE)
        if self._refused_jobs:
            self._free_keys()
        if kept is not None:
            raise _SendFailed(kept.error, sent)
        return len(rows), sent

    def _send_and_delete(self, cursor: Any, rows: Sequence[tuple[Any, ...]]) -> tuple[int, StoreRefusal | None]:
        """Send the rows (the store confirms), then delete them, all in the caller's transaction.

        Returns (rows handled: the store took them, or malformed and removed; the first refusal to send
        again or None). A row the store refused for good is recorded as a failed job and deleted; a row
        it did not take otherwise stays. A send that raises stored nothing known: _SendFailed, and the
        caller's transaction keeps every row.
        """
        now = time.time()
        prepared: list[PreparedPush] = []
        sources: list[Any] = []
        for row_id, name, text, due_at in rows:
            try:
                envelope = decode_envelope(text)
            except MalformedQueuedJobDataError as exc:
                logger.error(
                    "Outbox row %s of connection %r is malformed and is removed: %s", row_id, self.connection, exc
                )
                continue
            prepared.append(PreparedPush(envelope, max(0.0, float(due_at) - now), name))
            sources.append(row_id)
        self._refused_jobs.clear()  # of a transaction that rolled back: their rows stay, their keys too
        try:
            refusals = self.queue.store_many(prepared)
        except Exception as exc:
            raise _SendFailed(exc) from exc
        crashpoints.reach(AFTER_SEND)
        done = [row[0] for row in rows]
        kept = None
        if refusals:
            keep = set()
            for refusal in refusals:
                if refusal.final:
                    self._record_refused(prepared[refusal.index], refusal.error)
                else:
                    keep.add(sources[refusal.index])
                    kept = kept or refusal
            done = [row_id for row_id in done if row_id not in keep]
        if done:
            marks = ", ".join(["%s"] * len(done))
            cursor.execute(f"DELETE FROM {OUTBOX_TABLE} WHERE id IN ({marks})", done)
        return len(rows) - len(refusals), kept  # a malformed row counts as handled, as it always did

    def _record_refused(self, item: PreparedPush, error: BaseException) -> None:
        """A row the store refused for good: a failed-job record (as the worker writes one) with the reason."""
        envelope = item.envelope
        job = QueuedJob(
            id=envelope.id,
            queue=item.queue,
            job_class=envelope.job_class,
            args=envelope.args,
            attempts=envelope.attempts,
            max_attempts=envelope.max_attempts,
            pushed_at=envelope.pushed_at_datetime(),
            metadata=envelope.metadata,
        )
        reason = f"{type(error).__name__}: {exception_text(error)}"
        refused = OutboxRefusedError(
            f"the {self.queue.backend_name} store refused the job for good on queue {item.queue!r}: {reason}"
        )
        refused.__cause__ = error
        record_id = RECORDER.record(job, refused, self.connection)
        self._refused_jobs.append(job)
        self.refused += 1
        logger.error(
            "The store refused outbox job %s of connection %r (queue %r) for good (%s): recorded as failed job %s "
            "and removed from the outbox",
            envelope.id,
            self.connection,
            item.queue,
            reason,
            record_id,
        )

    def _free_keys(self) -> None:
        """After the commit: free the unique keys of the jobs refused for good, as the worker frees the key of
        a job that never started. With an outbox, every key of the connection is in the outbox database; a
        crash before this leaves the key to expire (unique_for)."""
        jobs, self._refused_jobs = self._refused_jobs, []
        for job in jobs:
            try:
                free_key(self.queue, job, lambda queue, held: database_lock_store(queue, self.database))
            except Exception as exc:
                logger.error(
                    "The unique key of refused job %s of connection %r could not be freed (%s: %s); it expires by "
                    "itself",
                    job.id,
                    self.connection,
                    type(exc).__name__,
                    exception_text(exc),
                )

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


class _SendFailed(Exception):
    """A queue's send failed (its store's error in ``error``) after ``sent`` of its rows were sent this round."""

    def __init__(self, error: BaseException, sent: int = 0) -> None:
        super().__init__(error)
        self.error = error
        self.sent = sent


def refused_count(connection: str) -> int:
    """Failed-job records of the connection's outbox rows that its store refused for good (queue_status)."""
    from kinetis_queue.models import FailedJob

    return FailedJob.objects.filter(connection=connection, exception_class=REFUSED_CLASS).count()


def backlog(connection: str, settings: OutboxSettings) -> tuple[int, float | None]:
    """(rows waiting in the connection's outbox, when the oldest was pushed or None): queue_status, W005."""
    with connections[settings.database].cursor() as cursor:
        cursor.execute(BACKLOG, [connection])
        count, oldest = cursor.fetchone()
    return int(count), None if oldest is None else float(oldest)
