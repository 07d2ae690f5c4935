"""SqlQueue: jobs in a table of the Django database (``kinetis_queue_jobs``)."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Sequence
from typing import Any, NamedTuple, Self

from django.db import DatabaseError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.utils import load_backend

from kinetis_queue.backends.sql.claim import claim_many, rollback_quietly
from kinetis_queue.backends.sql.options import OPTIONS
from kinetis_queue.backends.sql.pooling import owns_its_session, transaction_pooled
from kinetis_queue.backends.sql.tables import explain
from kinetis_queue.backends.sql.timeouts import DEFAULT_OPERATION_TIMEOUT, bounded, client_options
from kinetis_queue.backends.sql.unique import SqlLocks
from kinetis_queue.conf import ConnectionSettings
from kinetis_queue.contracts import (
    SWEEP_PAUSE,
    ClearableQueue,
    DisposableQueue,
    JobSettlement,
    PreparedPush,
    QueuedJob,
    QueueStats,
    RenewableQueue,
    Reserved,
    Withdrawal,
)
from kinetis_queue.exceptions import InvalidQueueArgumentError, MalformedJobSettledError, StaleJobHandleError
from kinetis_queue.payload.envelope import (
    Envelope,
    decode_fields,
    decode_queue_name,
    dumps,
    loads,
    settle_if_malformed,
)
from kinetis_queue.unique.store import OwnLockStore

#: The jobs table (models.QueuedJobRecord), named in every statement below.
JOBS_TABLE = "kinetis_queue_jobs"
INSERT_HEAD = (
    "INSERT INTO kinetis_queue_jobs (job_id, queue, job_class, args, metadata, attempts, max_attempts, "
    "pushed_at, available_at, priority)"
)
INSERT = f"{INSERT_HEAD} VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
#: One row of INSERT's VALUES: what a multi-row push repeats.
INSERT_ROW = "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
#: Parameters per row of INSERT.
INSERT_PARAMS = 10
#: Most rows per multi-row INSERT (each is INSERT_PARAMS parameters; a database's own parameter ceiling lowers it,
#: e.g. SQLite's 999 or 32,766).
PUSH_CHUNK = 1000
#: PostgreSQL: the push and its wake-up in one statement (RETURNING evaluates pg_notify() for the row).
#: A NOTIFY inside the push's transaction is delivered at commit (never for a rolled-back push), and
#: equal notifications of one transaction are delivered once.
PUSH_NOTIFY = f"{INSERT} RETURNING pg_notify(%s, '')"
#: PostgreSQL: push_many()'s rows as one array per column (ten parameters whatever the batch size).
PUSH_MANY_POSTGRESQL = (
    f"{INSERT_HEAD} SELECT * FROM unnest(%s::varchar[], %s::varchar[], %s::varchar[], %s::text[], %s::text[], "
    "%s::integer[], %s::integer[], %s::double precision[], %s::double precision[], %s::smallint[])"
)
#: PostgreSQL: push_many()'s wake-ups, one per distinct queue of the batch, in the batch's transaction.
NOTIFY_MANY = "SELECT pg_notify(channel, '') FROM unnest(%s::text[]) AS channel"
#: PostgreSQL, before an idle wait: when the next delayed job on the queues becomes due, so the wait
#: ends then rather than up to a pause later (a delay ends without a NOTIFY).
NEXT_DUE = "SELECT MIN(available_at) FROM kinetis_queue_jobs WHERE queue = ANY(%s) AND available_at > %s"
#: Seconds a wait ends after the due time it was shortened to, so the claim then finds the job due.
DUE_MARGIN = 0.002
#: How long an idle worker pauses between empty claims by default: PostgreSQL waits for a push's
#: NOTIFY (so the pause only bounds how late a delayed job may start); MySQL, MariaDB and SQLite poll,
#: and each pause costs one claim: 20 per second per idle worker at 0.05 s.
LISTENING_POLL_PAUSE = SWEEP_PAUSE
POLLING_POLL_PAUSE = 0.05
#: Any non-None threshold lets psycopg honour prepare=True on the push INSERT.
PREPARE_THRESHOLD = 5
#: The fence: every settlement and renewal names the row and the token its reservation wrote.
FENCE = "WHERE id = %s AND reserved_token = %s"
DELETE = f"DELETE FROM kinetis_queue_jobs {FENCE}"
RELEASE = (
    "UPDATE kinetis_queue_jobs SET reserved_at = NULL, reserved_token = NULL, attempts = attempts + 1, "
    f"available_at = %s {FENCE}"
)
#: Give back an unstarted delivery: the claim charged no attempt for it (it adds one only when it
#: takes over an expired reservation, for the holder that lost it), so clearing the reservation is
#: enough for the next claim to deliver the same attempt number; ``available_at`` and ``id`` are
#: kept, so the row is poppable at once and keeps its place ahead of the jobs pushed after it.
UNRESERVE = f"UPDATE kinetis_queue_jobs SET reserved_at = NULL, reserved_token = NULL {FENCE}"
#: Give back with a delay (a delivery held back at its concurrency limit): due again at the given time,
#: still with no attempt charged.
UNRESERVE_UNTIL = f"UPDATE kinetis_queue_jobs SET reserved_at = NULL, reserved_token = NULL, available_at = %s {FENCE}"
#: ack_many(): the fence of a batch, row by row: a row goes only when its id AND the token of the same
#: receipt match, read back as (id, token) pairs. PostgreSQL joins the receipts (two arrays, one
#: statement text whatever the batch size) to the rows by primary key.
ACK_MANY_POSTGRESQL = (
    "DELETE FROM kinetis_queue_jobs AS job USING unnest(%s::bigint[], %s::text[]) AS held(id, token) "
    "WHERE job.id = held.id AND job.reserved_token = held.token RETURNING job.id, job.reserved_token"
)
#: Jobs per batched ack where each value is a parameter of its own (3 per job; SQLite's floor is 999).
ACK_CHUNK = 300
RENEW = f"UPDATE kinetis_queue_jobs SET reserved_at = %s {FENCE}"
SIZE = "SELECT COUNT(*) FROM kinetis_queue_jobs WHERE queue = %s AND (reserved_at IS NULL OR reserved_at <= %s)"
CLEAR = "DELETE FROM kinetis_queue_jobs WHERE queue = %s AND reserved_at IS NULL"
#: queue_status in one statement, so the figures are one snapshot: live reservations, delayed, all rows.
STATS = (
    "SELECT COALESCE(SUM(CASE WHEN reserved_at > %s THEN 1 ELSE 0 END), 0), "
    "COALESCE(SUM(CASE WHEN (reserved_at IS NULL OR reserved_at <= %s) AND available_at > %s THEN 1 ELSE 0 END), 0), "
    "COUNT(*) FROM kinetis_queue_jobs WHERE queue = %s"
)
QUEUE_NAMES = "SELECT DISTINCT queue FROM kinetis_queue_jobs ORDER BY queue"
#: withdraw() (cancel()): the rows of a job id and whether each is reserved. There is no index on job_id,
#: and none is added (push and ack are the hot paths), so this reads the jobs table: a plain read, which
#: takes no row lock on any of the four databases (MVCC), so it blocks neither claims nor pushes.
FIND_JOB = "SELECT id, reserved_at FROM kinetis_queue_jobs WHERE job_id = %s"
#: Then each unreserved row found, by primary key: a claim that reserved it in between wins (0 rows).
WITHDRAW = "DELETE FROM kinetis_queue_jobs WHERE id = %s AND reserved_at IS NULL"
#: withdraw_many() (a workflow's cancel): FIND_JOB and WITHDRAW for many ids, each one statement (a
#: single read of the jobs table, then deletes by primary key), whatever the number of jobs, up to a
#: database's parameter ceiling (SQLite). ``{}``: the placeholders.
FIND_JOBS = "SELECT id, job_id, reserved_at FROM kinetis_queue_jobs WHERE job_id IN ({})"
WITHDRAW_ROWS = "DELETE FROM kinetis_queue_jobs WHERE id IN ({}) AND reserved_at IS NULL"
#: MySQL (no DELETE ... RETURNING), after a WITHDRAW_ROWS that deleted fewer rows than it named: which
#: of them a claim reserved in between (one it reserved and settled meanwhile then counts as removed).
STILL_THERE = "SELECT id FROM kinetis_queue_jobs WHERE id IN ({})"
#: PostgreSQL, the worker's own connection: asynchronous commit (see SqlQueue), READ COMMITTED (the
#: claim's SKIP LOCKED needs it: at REPEATABLE READ or SERIALIZABLE, which an alias's isolation_level
#: gives only atomic() blocks but a server or role default gives every statement, concurrent claims
#: fail with serialization errors), and no sequential or bitmap scans: this connection runs only the
#: claim and statements by primary key, each meant for an index, and with stale statistics the planner
#: would otherwise scan and sort every ready row for each claim (claim.py, "Plan stability").
WORKER_SESSION = (
    "SET synchronous_commit TO OFF; SET default_transaction_isolation TO 'read committed'; "
    "SET enable_seqscan TO off; SET enable_bitmapscan TO off"
)


def channel(queue: str) -> str:
    """The PostgreSQL NOTIFY channel of ``queue``: a digest, as a queue name may outgrow an identifier (63 bytes)."""
    return "kinetis_queue_" + hashlib.blake2b(queue.encode(), digest_size=16).hexdigest()


class SqlHandle(NamedTuple):
    """The delivery receipt: the row and the token its reservation wrote."""

    row_id: int
    token: str


class SqlQueue(ClearableQueue, RenewableQueue, DisposableQueue, OwnLockStore):
    """Jobs in the Django database (table kinetis_queue_jobs).

    Reservation: a claim under SKIP LOCKED (PostgreSQL, MySQL 8, MariaDB 10.6+) or a guarded
    UPDATE (SQLite) writes ``reserved_at`` and a fresh random ``reserved_token`` (see claim.py).
    Fence: ack/release/fail/renew match ``id`` and ``reserved_token``; a settlement whose row count
    is not 1 raises StaleJobHandleError and wrote nothing (contract: "Delivery receipts and stale
    settlements"). Clock: reserved_at and available_at use this process's time, not the database's.

    ``push()``, ``size()`` and ``clear()`` run on Django's own connection for the alias, so a
    push inside ``atomic(using=alias)`` is part of that transaction and visible only on commit.
    The worker's side (pop, settlements, renewal) runs on a connection of its own per thread,
    which this queue keeps open whatever CONN_MAX_AGE says: the worker's per-job
    ``close_old_connections()`` then never costs a reconnect, and a job's own database work cannot
    leave a transaction open on it. On PostgreSQL that connection commits asynchronously
    (``synchronous_commit = off``): a database crash can forget the last claims and settlements,
    which re-runs those jobs (at-least-once holds, and the token fence rejects the old receipt);
    pushes stay synchronous. Those settings are set only where the connection is a server session of
    its own (SESSION_SETTINGS; by default, checked when it opens), never through a pooler, where they would
    reach other clients; behind a transaction pooler (an alias with DISABLE_SERVER_SIDE_CURSORS) idle
    workers also poll instead of LISTENing (pooling.py).
    """

    backend_name = "sql"
    supports_priority = True
    settings_schema = OPTIONS

    def __init__(
        self,
        *,
        database: str = "default",
        visibility_timeout: int = 300,
        prepared_statements: bool = True,
        connection: str | None = None,
        operation_timeout: float = DEFAULT_OPERATION_TIMEOUT,
        poll_pause: float | None = None,
        session_settings: bool | None = None,
    ) -> None:
        super().__init__(connection=connection)
        self.database = database
        self.prepared_statements = prepared_statements
        #: Seconds one worker-side call (connect, claim, settlement, renewal) may take (see timeouts.py).
        self.operation_timeout = operation_timeout
        self._visibility_timeout = visibility_timeout
        #: POLL_PAUSE as configured (None: the database's default, see ``poll_pause``).
        self._poll_pause = poll_pause
        #: SESSION_SETTINGS as configured (None: when the worker's connection owns its server session).
        self.session_settings = session_settings
        self._local = threading.local()
        self._opened: list[BaseDatabaseWrapper] = []
        self._opened_lock = threading.Lock()
        self._locks = SqlLocks(self)

    @classmethod
    def from_settings(cls, settings: ConnectionSettings) -> Self:
        return cls(
            database=settings.options["DATABASE"],
            visibility_timeout=settings.visibility_timeout,
            prepared_statements=settings.options["PREPARED_STATEMENTS"],
            connection=settings.name,
            operation_timeout=settings.options["OPERATION_TIMEOUT"],
            poll_pause=settings.options["POLL_PAUSE"],
            session_settings=settings.options["SESSION_SETTINGS"],
        )

    @property
    def poll_pause(self) -> float:
        """POLL_PAUSE, or by default LISTENING_POLL_PAUSE on PostgreSQL and POLLING_POLL_PAUSE elsewhere."""
        if self._poll_pause is not None:
            return self._poll_pause
        return LISTENING_POLL_PAUSE if self._listens() else POLLING_POLL_PAUSE

    @poll_pause.setter
    def poll_pause(self, seconds: float) -> None:
        self._poll_pause = seconds

    def _listens(self) -> bool:
        """Whether idle waits LISTEN: PostgreSQL, unless behind a transaction pooler (pooling.py)."""
        return connections[self.database].vendor == "postgresql" and not transaction_pooled(self.database)

    # -- connections ----------------------------------------------------------------------------

    def _worker_db(self) -> BaseDatabaseWrapper:
        """This thread's own connection for the worker's side, opened on first use and kept.

        Its waits are bounded by OPERATION_TIMEOUT: driver timeouts under the alias's own OPTIONS,
        plus ``bounded()`` around each call on PostgreSQL (kinetis_queue/backends/sql/timeouts.py).
        """
        db: BaseDatabaseWrapper | None = getattr(self._local, "db", None)
        if db is None:
            shared = connections[self.database]
            if shared.vendor == "sqlite" and shared.is_in_memory_db():  # type: ignore[attr-defined]
                return shared  # a second connection would see a different, empty database
            db = self._new_connection()
            self._local.db = db
        if db.errors_occurred:
            with bounded(db, self.operation_timeout):  # Django's check runs a query
                db.close_if_unusable_or_obsolete()
        if db.connection is None:
            with db.wrap_database_errors:  # a refused connection is Django's OperationalError, as everywhere
                db.connect()
            if db.vendor == "postgresql":
                with bounded(db, self.operation_timeout):
                    if self._sets_session(db):
                        with db.cursor() as cursor:
                            cursor.execute(WORKER_SESSION)
        return db

    def _sets_session(self, db: BaseDatabaseWrapper) -> bool:
        """Whether the worker's freshly opened PostgreSQL connection gets WORKER_SESSION: SESSION_SETTINGS, or
        by default only a connection that owns its server session (through a pooler, it would leak: pooling.py)."""
        if self.session_settings is not None:
            return self.session_settings
        return not transaction_pooled(self.database) and owns_its_session(db)

    def _new_connection(self) -> BaseDatabaseWrapper:
        """A connection of this queue's own to the alias (not yet open), closed by ``dispose()``."""
        shared = connections[self.database]
        options = {**client_options(shared.vendor, self.operation_timeout), **shared.settings_dict["OPTIONS"]}
        settings_dict = {
            **shared.settings_dict,
            "CONN_MAX_AGE": None,
            "CONN_HEALTH_CHECKS": False,
            "OPTIONS": options,
        }
        db: BaseDatabaseWrapper = load_backend(settings_dict["ENGINE"]).DatabaseWrapper(settings_dict, self.database)
        db.inc_thread_sharing()  # dispose() may close it from another thread
        with self._opened_lock:
            self._opened.append(db)
        return db

    def missing_tables(self) -> list[str]:
        """[JOBS_TABLE] if this queue's database lacks it (``migrate`` never ran there), else [].

        Asked once by ``queue_work`` at start-up, on the worker's own connection, so OPERATION_TIMEOUT
        bounds it like every worker-side call.
        """
        db = self._worker_db()
        with bounded(db, self.operation_timeout), db.cursor() as cursor:
            present = db.introspection.table_names(cursor)
        return [] if JOBS_TABLE in present else [JOBS_TABLE]

    def dispose(self) -> None:
        with self._opened_lock:
            opened, self._opened = self._opened, []
        self._local = threading.local()
        for db in opened:
            db.close()

    # -- the contract -----------------------------------------------------------------------------

    def visibility_timeout(self) -> int:
        return self._visibility_timeout

    def jobs_database(self) -> str:
        """This connection's database: its concurrency slots live there too (kinetis_queue.limits)."""
        return self.database

    def lock_store(self) -> SqlLocks:
        """Unique jobs' locks in this database, written with the job (kinetis_queue/backends/sql/unique.py)."""
        return self._locks

    def _push(self, envelope: Envelope, delay: float, queue: str) -> None:
        params = self._row(envelope, delay, queue)
        db = connections[self.database]
        try:
            if db.vendor == "postgresql":
                params.append(channel(queue))
                if self.prepared_statements and not db.queries_logged and not transaction_pooled(self.database):
                    self._push_prepared(db, params)
                    return
            with db.cursor() as cursor:
                cursor.execute(PUSH_NOTIFY if db.vendor == "postgresql" else INSERT, params)
        except DatabaseError as exc:
            # Only after the database refused: no query is added to a successful push.
            clear = explain(self.database, exc, JOBS_TABLE)
            if clear is None:
                raise
            raise clear from exc

    def _push_many(self, prepared: Sequence[PreparedPush]) -> None:
        """One multi-row INSERT per PUSH_CHUNK jobs, all in one transaction on Django's connection.

        Inside the caller's ``atomic(using=alias)`` block the rows are part of it (no savepoint is
        added: a failed chunk spoils the caller's transaction, as a failed push() does); outside
        one, the chunks commit together once. On PostgreSQL the rows travel as ten arrays
        (PUSH_MANY_POSTGRESQL, bound server-side on a cursor kept per connection, as the prepared
        push: formatting thousands of values client-side cost more than the INSERT), and one more
        statement NOTIFYs each queue's channel in the same transaction.
        """
        db = connections[self.database]
        rows = [self._row(item.envelope, item.delay, item.queue) for item in prepared]
        try:
            with transaction.atomic(using=self.database, savepoint=False):
                if db.vendor == "postgresql" and not db.queries_logged:
                    self._push_many_arrays(db, rows, sorted({channel(item.queue) for item in prepared}))
                    return
                ceiling = db.features.max_query_params
                chunk = PUSH_CHUNK if ceiling is None else max(1, min(PUSH_CHUNK, ceiling // INSERT_PARAMS))
                with db.cursor() as cursor:
                    for start in range(0, len(rows), chunk):
                        part = rows[start : start + chunk]
                        values = ", ".join([INSERT_ROW] * len(part))
                        cursor.execute(f"{INSERT_HEAD} VALUES {values}", [value for row in part for value in row])
                    if db.vendor == "postgresql":
                        cursor.execute(NOTIFY_MANY, [sorted({channel(item.queue) for item in prepared})])
        except DatabaseError as exc:
            clear = explain(self.database, exc, JOBS_TABLE)
            if clear is None:
                raise
            raise clear from exc

    def _push_many_arrays(self, db: BaseDatabaseWrapper, rows: list[list[Any]], channels: list[str]) -> None:
        """PostgreSQL: the rows as one array per column, PUSH_CHUNK rows per INSERT, then the NOTIFYs."""
        cursor = self._raw_cursor(db)
        with db.wrap_database_errors:
            for start in range(0, len(rows), PUSH_CHUNK):
                columns = [list(column) for column in zip(*rows[start : start + PUSH_CHUNK], strict=True)]
                cursor.execute(PUSH_MANY_POSTGRESQL, columns)
            cursor.execute(NOTIFY_MANY, [channels])

    def _raw_cursor(self, db: BaseDatabaseWrapper) -> Any:
        """A psycopg cursor (server-side binding) on Django's own connection, kept per thread and connection.

        It runs inside whatever transaction Django's connection is in, as ``db.cursor()`` would.
        """
        db.ensure_connection()
        db.validate_no_broken_transaction()
        raw = db.connection
        cached = getattr(self._local, "push_cursor", None)
        if cached is None or cached[0] is not raw:
            import psycopg

            cached = (raw, psycopg.Cursor(raw))
            self._local.push_cursor = cached
        return cached[1]

    @staticmethod
    def _row(envelope: Envelope, delay: float, queue: str) -> list[Any]:
        """The INSERT's values for one job, in INSERT's column order."""
        return [
            envelope.id,
            queue,
            envelope.job_class,
            dumps(envelope.args),
            dumps(envelope.metadata),
            envelope.attempts,
            envelope.max_attempts,
            envelope.pushed_at,
            envelope.pushed_at + delay,
            envelope.priority,
        ]

    def insert_row(self, db: BaseDatabaseWrapper, cursor: CursorWrapper, prepared: PreparedPush) -> int:
        """Insert ``prepared``'s row on ``cursor`` (with its NOTIFY on PostgreSQL) and return its primary key: the
        unique lock store's push, which takes the key and inserts the row in one transaction (unique.py)."""
        params = self._row(prepared.envelope, prepared.delay, prepared.queue)
        if db.vendor == "postgresql":
            cursor.execute(f"{INSERT} RETURNING id, pg_notify(%s, '')", [*params, channel(prepared.queue)])
            return int(cursor.fetchone()[0])
        cursor.execute(INSERT, params)
        return int(cursor.lastrowid)

    def _push_prepared(self, db: BaseDatabaseWrapper, params: list[Any]) -> None:
        """PostgreSQL's hot path: one server-side prepared INSERT (and its NOTIFY) on a cursor kept per connection.

        Django binds client-side, never prepares, and builds a cursor per call; on a one-row INSERT
        that is a large share of the time (``python -m bench`` shows it). The statement still runs on
        Django's own connection for the alias, so it joins an open ``atomic()`` block exactly like
        ``db.cursor()`` would, and errors are wrapped into Django's as usual. Skipped under DEBUG, whose query log needs
        Django's cursor, when PREPARED_STATEMENTS is False, and behind a transaction pooler
        (pooling.py), which cannot keep a prepared statement.
        """
        cursor = self._raw_cursor(db)
        raw = db.connection
        # Django opens its connections with prepare_threshold=None, which makes psycopg ignore
        # prepare=True; lift it for this one statement only, so Django's own queries stay unprepared.
        threshold = raw.prepare_threshold
        raw.prepare_threshold = PREPARE_THRESHOLD
        try:
            with db.wrap_database_errors:
                cursor.execute(PUSH_NOTIFY, params, prepare=True)
        finally:
            raw.prepare_threshold = threshold

    def _sweep(self, queues: tuple[str, ...]) -> QueuedJob | None:
        db, rows = self._claim(queues, 1)
        if not rows:
            return None
        row = rows[0]
        handle = SqlHandle(row[0], row[9])
        return settle_if_malformed(lambda: self._decode(row, handle), lambda: self._remove_malformed(db, handle))

    def _sweep_many(self, queues: tuple[str, ...], limit: int) -> Reserved:
        """One claim statement (a transaction on MySQL) reserves up to ``limit`` rows (claim.py).

        Each row is its own delivery with its own token; a malformed one is removed (fenced, as by
        pop()) and reported, and the rows reserved with it are delivered.
        """
        db, rows = self._claim(queues, limit)
        reserved = Reserved()
        for row in rows:
            handle = SqlHandle(row[0], row[9])
            try:
                job = settle_if_malformed(
                    lambda row=row, handle=handle: self._decode(row, handle),  # type: ignore[misc]
                    lambda handle=handle: self._remove_malformed(db, handle),  # type: ignore[misc]
                )
            except MalformedJobSettledError as exc:
                reserved.malformed.append(exc)
            else:
                reserved.jobs.append(job)
        return reserved

    def _claim(self, queues: tuple[str, ...], limit: int) -> tuple[BaseDatabaseWrapper, list[tuple[Any, ...]]]:
        db = self._worker_db()
        now = time.time()
        with bounded(db, self.operation_timeout):
            return db, claim_many(db, queues, limit, now, now - self._visibility_timeout)

    def _wait(self, queues: tuple[str, ...], seconds: float) -> None:
        """PostgreSQL: wait up to ``seconds`` for a NOTIFY on one of ``queues``' channels; elsewhere (and
        behind a transaction pooler), sleep.

        The LISTEN runs on a connection of its own per thread, kept open. Notifications that arrive
        between two waits (during a claim) are kept by the client and end the next wait at once, so
        a push is never missed once its channel is listened to. When the channels change, the new
        LISTENs happen here and the wait ends at once: a push that committed between the empty claim
        and the LISTEN is found by the next claim. A delay ends without a NOTIFY, so each wait also
        ends when the next delayed job on the queues becomes due (one indexed query per idle wait).
        A failing listener is dropped (the next wait opens another) and the pause is slept instead:
        the claim reports the database's state.
        """
        if not self._listens():
            time.sleep(seconds)
            return
        try:
            listener = self._listener()
            if self._listen(listener, {channel(name) for name in queues}):
                return
            seconds = self._until_next_due(queues, seconds)  # > 0: NEXT_DUE reads only what is not due yet
            for _ in listener.connection.notifies(timeout=seconds, stop_after=1):
                pass
        except Exception:
            self._drop_listener()
            time.sleep(seconds)

    def _until_next_due(self, queues: tuple[str, ...], seconds: float) -> float:
        """``seconds``, shortened to when the next delayed job on ``queues`` becomes due (a little after)."""
        db = self._worker_db()
        now = time.time()
        with bounded(db, self.operation_timeout), db.cursor() as cursor:
            cursor.execute(NEXT_DUE, [list(queues), now])
            due = cursor.fetchone()[0]
        return seconds if due is None else min(seconds, due - now + DUE_MARGIN)

    def _listener(self) -> BaseDatabaseWrapper:
        """This thread's LISTEN connection (PostgreSQL), opened on first use and kept."""
        db: BaseDatabaseWrapper | None = getattr(self._local, "listener", None)
        if db is None:
            db = self._new_connection()
            self._local.listener = db
            self._local.listening = set()
        if db.connection is None:
            with db.wrap_database_errors:
                db.connect()
            self._local.listening = set()
        return db

    def _listen(self, db: BaseDatabaseWrapper, channels: set[str]) -> bool:
        """LISTEN to ``channels`` only; True when that changed what the connection listens to."""
        listening: set[str] = self._local.listening
        if channels == listening:
            return False
        raw = db.connection
        with bounded(db, self.operation_timeout):
            for name in sorted(listening - channels):
                raw.execute(f'UNLISTEN "{name}"')
            for name in sorted(channels - listening):
                raw.execute(f'LISTEN "{name}"')
        self._local.listening = set(channels)
        return True

    def _drop_listener(self) -> None:
        db: BaseDatabaseWrapper | None = getattr(self._local, "listener", None)
        self._local.listener = None
        self._local.listening = set()
        if db is not None:
            with self._opened_lock:
                self._opened = [other for other in self._opened if other is not db]
            try:
                db.close()
            except Exception:  # noqa: S110  # pragma: no cover - psycopg's close() does not raise; kept so a
                pass  # driver whose close() raises on a broken connection cannot fail the pop (the claim reports)

    @staticmethod
    def _decode(row: tuple[Any, ...], handle: SqlHandle) -> QueuedJob:
        _, job_id, queue, job_class, args, metadata, attempts, max_attempts, pushed_at = row[:9]
        envelope = decode_fields(job_id, pushed_at, job_class, loads(args), attempts, max_attempts, loads(metadata))
        return QueuedJob.delivered(envelope, decode_queue_name(queue), handle)

    def _remove_malformed(self, db: BaseDatabaseWrapper, handle: SqlHandle) -> None:
        # Contract: a reclaim between reserving and deleting makes the row someone else's.
        self._fenced(db, DELETE, [], handle, JobSettlement.FAIL)

    def ack(self, job: QueuedJob) -> None:
        self._fenced(self._worker_db(), DELETE, [], self._handle(job), JobSettlement.ACK)

    def _ack_many(self, jobs: Sequence[QueuedJob]) -> list[StaleJobHandleError | None]:
        """One fenced DELETE per batch (per ACK_CHUNK jobs on SQLite and MySQL), refusals per job.

        A job settled twice in one batch is acked once and refused the second time, as two acks would be.
        """
        handles = [self._handle(job) for job in jobs]
        db = self._worker_db()
        unique = list(dict.fromkeys(handles))
        acked: set[tuple[int, str]] = set()
        step = len(unique) if db.vendor == "postgresql" else ACK_CHUNK
        for start in range(0, len(unique), step):
            with bounded(db, self.operation_timeout):
                acked |= self._delete_fenced(db, unique[start : start + step])
        results: list[StaleJobHandleError | None] = []
        for handle in handles:
            if (handle.row_id, handle.token) in acked:
                acked.discard((handle.row_id, handle.token))
                results.append(None)
            else:
                results.append(StaleJobHandleError(JobSettlement.ACK))
        return results

    @staticmethod
    def _delete_fenced(db: BaseDatabaseWrapper, handles: list[SqlHandle]) -> set[tuple[int, str]]:
        """Delete the rows still held by ``handles``; return the (id, token) pairs deleted."""
        ids: list[Any] = [handle.row_id for handle in handles]
        with db.cursor() as cursor:
            if db.vendor == "postgresql":
                cursor.execute(ACK_MANY_POSTGRESQL, [ids, [handle.token for handle in handles]])
                return {(int(row[0]), row[1]) for row in cursor.fetchall()}
            # ``id IN`` gives the primary-key range; the row-value IN is the exact pair test.
            marks = ", ".join(["%s"] * len(handles))
            pairs = ", ".join(["(%s, %s)"] * len(handles))
            where = f"WHERE id IN ({marks}) AND (id, reserved_token) IN ({pairs})"
            params = ids + [value for handle in handles for value in handle]
            if db.vendor == "mysql" and not getattr(db, "mysql_is_mariadb", False):  # pragma: no cover - MySQL
                # only, and the test servers are PostgreSQL, MariaDB and SQLite. MySQL has no
                # DELETE ... RETURNING: lock the matching rows, read them, delete them.
                cursor.execute("START TRANSACTION")
                try:
                    cursor.execute(f"SELECT id, reserved_token FROM kinetis_queue_jobs {where} FOR UPDATE", params)
                    found = {(int(row[0]), row[1]) for row in cursor.fetchall()}
                    cursor.execute(f"DELETE FROM kinetis_queue_jobs {where}", params)
                    cursor.execute("COMMIT")
                except BaseException:
                    rollback_quietly(cursor)
                    raise
                return found
            cursor.execute(f"DELETE FROM kinetis_queue_jobs {where} RETURNING id, reserved_token", params)
            return {(int(row[0]), row[1]) for row in cursor.fetchall()}

    def fail(self, job: QueuedJob) -> None:
        self._fenced(self._worker_db(), DELETE, [], self._handle(job), JobSettlement.FAIL)

    def _release(self, job: QueuedJob, delay: float) -> None:
        handle = self._handle(job)
        self._fenced(self._worker_db(), RELEASE, [time.time() + delay], handle, JobSettlement.RELEASE)

    def _unreserve(self, job: QueuedJob, delay: float) -> None:
        handle, db = self._handle(job), self._worker_db()
        if delay > 0:
            self._fenced(db, UNRESERVE_UNTIL, [time.time() + delay], handle, JobSettlement.UNRESERVE)
        else:
            self._fenced(db, UNRESERVE, [], handle, JobSettlement.UNRESERVE)

    def renew(self, job: QueuedJob) -> None:
        # Contract, "Reservation renewal": the row count is not read, because MySQL reports 0 for
        # an UPDATE that writes the value already stored (a renewal within the same second).
        handle = self._handle(job)
        db = self._worker_db()
        with bounded(db, self.operation_timeout), db.cursor() as cursor:
            cursor.execute(RENEW, [time.time(), handle.row_id, handle.token])

    def _size(self, queue: str) -> int:
        with connections[self.database].cursor() as cursor:
            cursor.execute(SIZE, [queue, time.time() - self._visibility_timeout])
            return int(cursor.fetchone()[0])

    def _clear(self, queue: str) -> int:
        with connections[self.database].cursor() as cursor:
            cursor.execute(CLEAR, [queue])
            return int(cursor.rowcount)

    def _stats(self, queue: str) -> QueueStats:
        # Contract, "Waiting counts and clearing": an expired reservation is ready (the next pop()
        # reclaims it), so ready + delayed == size(); reserved counts live reservations only.
        now = time.time()
        expired_before = now - self._visibility_timeout
        with connections[self.database].cursor() as cursor:
            cursor.execute(STATS, [expired_before, expired_before, now, queue])
            reserved, delayed, total = (int(n) for n in cursor.fetchone())
        ready = total - reserved - delayed
        return QueueStats(waiting=ready + delayed, ready=ready, delayed=delayed, reserved=reserved)

    def _withdraw(self, job_id: str) -> Withdrawal:
        """Delete the job's unreserved rows (REMOVED); a reserved one is left to its worker (HELD).

        On Django's connection for the alias, as push() is: inside ``atomic(using=alias)`` the removal
        commits with the caller's transaction. The lookup reads the jobs table (no index on job_id).
        """
        with connections[self.database].cursor() as cursor:
            cursor.execute(FIND_JOB, [job_id])
            rows = cursor.fetchall()
            removed = False
            for row_id, reserved_at in rows:
                if reserved_at is None:
                    cursor.execute(WITHDRAW, [row_id])
                    removed = removed or cursor.rowcount == 1
        if removed:
            return Withdrawal.REMOVED
        return Withdrawal.HELD if rows else Withdrawal.ABSENT

    def _withdraw_many(self, job_ids: list[str]) -> dict[str, Withdrawal]:
        """``_withdraw()`` for many ids in a fixed number of statements (FIND_JOBS, WITHDRAW_ROWS), not one
        read of the jobs table per job: a workflow's cancel runs inside an admin request."""
        db = connections[self.database]
        ceiling = db.features.max_query_params
        step = len(job_ids) if ceiling is None else max(1, min(len(job_ids), ceiling))
        found: dict[str, Withdrawal] = dict.fromkeys(job_ids, Withdrawal.ABSENT)
        with db.cursor() as cursor:
            for start in range(0, len(job_ids), step):
                found.update(self._withdraw_chunk(db, cursor, job_ids[start : start + step]))
        return found

    @staticmethod
    def _withdraw_chunk(db: BaseDatabaseWrapper, cursor: Any, job_ids: list[str]) -> dict[str, Withdrawal]:
        """Withdraw the jobs of ``job_ids`` (at most the parameter ceiling): what was found for those in the table.

        A claim that reserved a row between the read and the delete wins, as in ``_withdraw()``.
        """
        cursor.execute(FIND_JOBS.format(", ".join(["%s"] * len(job_ids))), job_ids)
        rows = cursor.fetchall()
        found = {job_id: Withdrawal.HELD for _, job_id, _ in rows}
        waiting = {row_id: job_id for row_id, job_id, reserved_at in rows if reserved_at is None}
        if not waiting:
            return found
        marks = ", ".join(["%s"] * len(waiting))
        if db.vendor == "mysql" and not getattr(db, "mysql_is_mariadb", False):  # pragma: no cover - MySQL only
            cursor.execute(WITHDRAW_ROWS.format(marks), list(waiting))
            removed = set(waiting)
            if cursor.rowcount != len(waiting):
                cursor.execute(STILL_THERE.format(marks), list(waiting))
                removed -= {row[0] for row in cursor.fetchall()}
        else:
            cursor.execute(f"{WITHDRAW_ROWS.format(marks)} RETURNING id", list(waiting))
            removed = {row[0] for row in cursor.fetchall()}
        for row_id in removed:
            found[waiting[row_id]] = Withdrawal.REMOVED
        return found

    def queue_names(self) -> list[str]:
        with connections[self.database].cursor() as cursor:
            cursor.execute(QUEUE_NAMES)
            return [row[0] for row in cursor.fetchall()]

    # -- helpers ----------------------------------------------------------------------------------

    @staticmethod
    def _handle(job: QueuedJob) -> SqlHandle:
        if not isinstance(job.handle, SqlHandle):
            raise InvalidQueueArgumentError("this QueuedJob was not delivered by an SQL queue")
        return job.handle

    def _fenced(
        self, db: BaseDatabaseWrapper, sql: str, params: list[Any], handle: SqlHandle, operation: JobSettlement
    ) -> None:
        with bounded(db, self.operation_timeout), db.cursor() as cursor:
            cursor.execute(sql, [*params, handle.row_id, handle.token])
            if cursor.rowcount != 1:
                raise StaleJobHandleError(operation)
