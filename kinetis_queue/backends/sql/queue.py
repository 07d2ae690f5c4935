"""SqlQueue: jobs in a table of the Django database (``kinetis_queue_jobs``)."""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any, NamedTuple, Self

from django.db import DatabaseError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.utils import load_backend

from kinetis_queue.backends.sql.claim import claim
from kinetis_queue.backends.sql.options import OPTIONS
from kinetis_queue.backends.sql.tables import explain
from kinetis_queue.backends.sql.timeouts import DEFAULT_OPERATION_TIMEOUT, bounded, client_options
from kinetis_queue.conf import ConnectionSettings
from kinetis_queue.contracts import (
    ClearableQueue,
    DisposableQueue,
    JobSettlement,
    QueuedJob,
    QueueStats,
    RenewableQueue,
)
from kinetis_queue.envelope import (
    Envelope,
    decode_fields,
    decode_queue_name,
    dumps,
    loads,
    settle_if_malformed,
)
from kinetis_queue.exceptions import InvalidQueueArgumentError, StaleJobHandleError

#: The jobs table (models.QueuedJobRecord), named in every statement below.
JOBS_TABLE = "kinetis_queue_jobs"
INSERT = (
    "INSERT INTO kinetis_queue_jobs (job_id, queue, job_class, args, metadata, attempts, max_attempts, "
    "pushed_at, available_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
#: Any non-None threshold lets psycopg honour prepare=True on the push INSERT.
PREPARE_THRESHOLD = 5
#: The fence: every settlement and renewal names the row and the token its reservation wrote.
FENCE = "WHERE id = %s AND reserved_token = %s"
DELETE = f"DELETE FROM kinetis_queue_jobs {FENCE}"
RELEASE = (
    "UPDATE kinetis_queue_jobs SET reserved_at = NULL, reserved_token = NULL, attempts = attempts + 1, "
    f"available_at = %s {FENCE}"
)
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


class SqlHandle(NamedTuple):
    """The delivery receipt: the row and the token its reservation wrote."""

    row_id: int
    token: str


class SqlQueue(ClearableQueue, RenewableQueue, DisposableQueue):
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
    pushes stay synchronous.
    """

    backend_name = "sql"
    settings_schema = OPTIONS

    def __init__(
        self,
        *,
        database: str = "default",
        visibility_timeout: int = 300,
        prepared_statements: bool = True,
        connection: str | None = None,
        operation_timeout: float = DEFAULT_OPERATION_TIMEOUT,
    ) -> None:
        super().__init__(connection=connection)
        self.database = database
        self.prepared_statements = prepared_statements
        #: Seconds one worker-side call (connect, claim, settlement, renewal) may take (see timeouts.py).
        self.operation_timeout = operation_timeout
        self._visibility_timeout = visibility_timeout
        self._local = threading.local()
        self._opened: list[BaseDatabaseWrapper] = []
        self._opened_lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: ConnectionSettings) -> Self:
        return cls(
            database=settings.options["DATABASE"],
            visibility_timeout=settings.visibility_timeout,
            prepared_statements=settings.options["PREPARED_STATEMENTS"],
            connection=settings.name,
            operation_timeout=settings.options["OPERATION_TIMEOUT"],
        )

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
            options = {**client_options(shared.vendor, self.operation_timeout), **shared.settings_dict["OPTIONS"]}
            settings_dict = {
                **shared.settings_dict,
                "CONN_MAX_AGE": None,
                "CONN_HEALTH_CHECKS": False,
                "OPTIONS": options,
            }
            db = load_backend(settings_dict["ENGINE"]).DatabaseWrapper(settings_dict, self.database)
            db.inc_thread_sharing()  # dispose() may close it from another thread
            with self._opened_lock:
                self._opened.append(db)
            self._local.db = db
        if db.errors_occurred:
            with bounded(db, self.operation_timeout):  # Django's check runs a query
                db.close_if_unusable_or_obsolete()
        if db.connection is None:
            with db.wrap_database_errors:  # a refused connection is Django's OperationalError, as everywhere
                db.connect()
            if db.vendor == "postgresql":
                # The claim's SKIP LOCKED needs READ COMMITTED: at REPEATABLE READ or SERIALIZABLE (an
                # alias's isolation_level only reaches atomic() blocks, but a server or role default
                # reaches every statement) concurrent claims fail with serialization errors.
                with bounded(db, self.operation_timeout), db.cursor() as cursor:
                    cursor.execute(
                        "SET synchronous_commit TO OFF; SET default_transaction_isolation TO 'read committed'"
                    )
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

    def _push(self, envelope: Envelope, delay: float, queue: str) -> None:
        params: list[Any] = [
            envelope.id,
            queue,
            envelope.job_class,
            dumps(envelope.args),
            dumps(envelope.metadata),
            envelope.attempts,
            envelope.max_attempts,
            envelope.pushed_at,
            envelope.pushed_at + delay,
        ]
        db = connections[self.database]
        try:
            if db.vendor == "postgresql" and self.prepared_statements and not db.queries_logged:
                self._push_prepared(db, params)
                return
            with db.cursor() as cursor:
                cursor.execute(INSERT, params)
        except DatabaseError as exc:
            # Only after the database refused: no query is added to a successful push.
            clear = explain(self.database, exc, JOBS_TABLE)
            if clear is None:
                raise
            raise clear from exc

    def _push_prepared(self, db: BaseDatabaseWrapper, params: list[Any]) -> None:
        """PostgreSQL's hot path: one server-side prepared INSERT on a cursor kept per connection.

        Django binds client-side, never prepares, and builds a cursor per call; on a one-row INSERT
        that is a large share of the time (``python -m bench`` shows it). The statement still runs on
        Django's own connection for the alias, so it joins an open ``atomic()`` block exactly like
        ``db.cursor()`` would, and errors are wrapped into Django's as usual. Skipped under DEBUG, whose query log needs
        Django's cursor, and when PREPARED_STATEMENTS is False (a pooler that cannot keep
        prepared statements).
        """
        db.ensure_connection()
        db.validate_no_broken_transaction()
        raw = db.connection
        cached = getattr(self._local, "push_cursor", None)
        if cached is None or cached[0] is not raw:
            import psycopg

            cached = (raw, psycopg.Cursor(raw))
            self._local.push_cursor = cached
        # Django opens its connections with prepare_threshold=None, which makes psycopg ignore
        # prepare=True; lift it for this one statement only, so Django's own queries stay unprepared.
        threshold = raw.prepare_threshold
        raw.prepare_threshold = PREPARE_THRESHOLD
        try:
            with db.wrap_database_errors:
                cached[1].execute(INSERT, params, prepare=True)
        finally:
            raw.prepare_threshold = threshold

    def _sweep(self, queues: tuple[str, ...]) -> QueuedJob | None:
        db = self._worker_db()
        now = time.time()
        token = secrets.token_hex(16)
        with bounded(db, self.operation_timeout):
            row = claim(db, queues, now, now - self._visibility_timeout, token)
        if row is None:
            return None
        handle = SqlHandle(row[0], token)
        return settle_if_malformed(lambda: self._decode(row, handle), lambda: self._remove_malformed(db, handle))

    @staticmethod
    def _decode(row: tuple[Any, ...], handle: SqlHandle) -> QueuedJob:
        _, job_id, queue, job_class, args, metadata, attempts, max_attempts, pushed_at = row
        envelope = decode_fields(job_id, pushed_at, job_class, loads(args), attempts, max_attempts, loads(metadata))
        return QueuedJob.delivered(envelope, decode_queue_name(queue), handle)

    def _remove_malformed(self, db: BaseDatabaseWrapper, handle: SqlHandle) -> None:
        # Contract: a reclaim between reserving and deleting makes the row someone else's.
        self._fenced(db, DELETE, [], handle, JobSettlement.FAIL)

    def ack(self, job: QueuedJob) -> None:
        self._fenced(self._worker_db(), DELETE, [], self._handle(job), JobSettlement.ACK)

    def fail(self, job: QueuedJob) -> None:
        self._fenced(self._worker_db(), DELETE, [], self._handle(job), JobSettlement.FAIL)

    def _release(self, job: QueuedJob, delay: float) -> None:
        handle = self._handle(job)
        self._fenced(self._worker_db(), RELEASE, [time.time() + delay], handle, JobSettlement.RELEASE)

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
