"""The SQL backend's unique-job lock store (kinetis_queue/backends/sql/unique.py) where the conformance suite does
not reach: a missing lock table, a refusing database, a row pruned or a holder reserved between two statements
of the push, a MariaDB deadlock retried, a lock row left by the Django-database store."""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.db import DatabaseError, transaction
from django.db import connections as db_connections

from kinetis_queue import connections
from kinetis_queue.backends.sql.unique import REPLACE, SELECT_LOCK
from kinetis_queue.contracts import Queue
from kinetis_queue.exceptions import QueueTablesMissingError
from kinetis_queue.models import UniqueLockRecord
from kinetis_queue.unique import lock_of
from tests import jobs
from tests.support.helpers import before_first, in_thread, wait_until


@pytest.fixture
def sqlite_queue() -> Iterator[Queue]:
    queue = connections.build("sqlite")
    try:
        yield queue
    finally:
        queue.dispose()  # type: ignore[attr-defined]


def test_a_unique_push_on_sqlite_without_the_lock_table_says_the_tables_are_missing(
    sqlite_queue: Queue, queue_name: str
) -> None:
    """SQLite reports a missing table as an OperationalError, the class a deadlock comes as: it is still
    explained as the missing table (a forgotten migrate), as a plain push explains its own."""
    with db_connections["default"].cursor() as cursor:
        cursor.execute("ALTER TABLE kinetis_queue_unique_locks RENAME TO kinetis_queue_unique_locks_away")
    try:
        with pytest.raises(QueueTablesMissingError) as raised:
            sqlite_queue.push(jobs.Unique("x"), queue=queue_name)
    finally:
        with db_connections["default"].cursor() as cursor:
            cursor.execute("ALTER TABLE kinetis_queue_unique_locks_away RENAME TO kinetis_queue_unique_locks")
    assert str(raised.value) == (
        "the kinetis_queue tables are missing in database 'default' (kinetis_queue_unique_locks): "
        "run `manage.py migrate`"
    )
    assert sqlite_queue.size(queue_name) == 0


@pytest.fixture
def postgres_queue() -> Iterator[Queue]:
    queue = connections.build("postgres")
    try:
        yield queue
    finally:
        queue.dispose()  # type: ignore[attr-defined]


def test_a_unique_push_the_database_refuses_raises_its_own_error_not_a_missing_table(
    postgres_queue: Queue, queue_name: str
) -> None:
    """A read-only session (a standby, a database set read-only): the tables are there, so the database's own
    error comes through, never a "run migrate"."""
    db = db_connections["postgres"]
    with db.cursor() as cursor:
        cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY")
    try:
        with pytest.raises(DatabaseError) as raised:
            postgres_queue.push(jobs.Unique("read-only"), queue=queue_name)
    finally:
        with db.cursor() as cursor:
            cursor.execute("SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE")
    assert not isinstance(raised.value, QueueTablesMissingError)
    assert "read-only transaction" in str(raised.value)
    assert postgres_queue.size(queue_name) == 0


def lock_key(queue: Queue, queue_name: str) -> str:
    lock = lock_of(queue.prepare(jobs.Unique("p"), queue=queue_name))
    assert lock is not None
    return lock.key


def test_a_lock_row_pruned_between_the_insert_and_the_locking_read_is_taken_again(
    postgres_queue: Queue, queue_name: str
) -> None:
    """The first holder's key expired; queue_prune deletes its row after the push's INSERT ... ON CONFLICT met it
    and before the push locked it: the push finds no row, inserts the lock again and holds the key."""
    first = postgres_queue.push(jobs.Unique("p"), queue=queue_name, unique_for=0.05)
    expires_at = UniqueLockRecord.objects.using("postgres").get(job_id=first).expires_at
    wait_until(lambda: time.time() > expires_at, 5)
    calls: list[str] = []

    def prune() -> None:
        in_thread(lambda: call_command("queue_prune", stdout=io.StringIO())).join()

    with db_connections["postgres"].execute_wrapper(before_first(SELECT_LOCK, prune, calls)):
        second = postgres_queue.push(jobs.Unique("p"), queue=queue_name)

    assert len(calls) == 1 and second != first  # the row was gone at the locking read: inserted again
    assert (
        UniqueLockRecord.objects.using("postgres").get(lock_key=lock_key(postgres_queue, queue_name)).job_id == second
    )
    assert postgres_queue.push(jobs.Unique("p"), queue=queue_name) == second  # the key is the second's now
    assert postgres_queue.size(queue_name) == 2


def test_a_debounced_push_whose_holder_was_reserved_meanwhile_is_queued_anew(
    postgres_queue: Queue, queue_name: str
) -> None:
    """The holder was waiting when the push read it, and a worker reserved it before the push replaced its
    arguments: the started holder keeps its own, and the newest push is a new job holding the key."""
    holder = postgres_queue.push(jobs.Debounced("first"), queue=queue_name)
    popped: list[Any] = []

    def reserve() -> None:
        other = connections.build("postgres")
        try:
            in_thread(lambda: popped.append(other.pop(5, [queue_name]))).join()
        finally:
            other.dispose()  # type: ignore[attr-defined]

    calls: list[str] = []
    with db_connections["postgres"].execute_wrapper(before_first(REPLACE, reserve, calls)):
        newest = postgres_queue.push(jobs.Debounced("second"), queue=queue_name)

    [started] = popped
    assert (started.id, started.args["label"]) == (holder, "first")
    assert newest != holder
    assert postgres_queue.push(jobs.Debounced("third"), queue=queue_name) == newest  # replaces the new holder
    waiting = postgres_queue.pop(5, [queue_name])
    assert waiting is not None and (waiting.id, waiting.args["label"]) == (newest, "third")
    postgres_queue.ack(waiting)
    postgres_queue.ack(started)


def test_a_lock_row_without_a_job_row_holds_nothing_on_the_sql_backend(sqlite_queue: Queue, queue_name: str) -> None:
    """A row the Django-database store wrote for the connection's key (no job row: the connection was an SQS one
    before, say) names no job of this backend: the push takes the key."""
    lock = lock_of(sqlite_queue.prepare(jobs.Unique("n"), queue=queue_name))
    assert lock is not None
    now = time.time()
    UniqueLockRecord.objects.using("default").create(
        lock_key=lock.key, job_id="f" * 32, job_row=None, until="settled", expires_at=now + 60, claimed_at=now
    )

    job_id = sqlite_queue.push(jobs.Unique("n"), queue=queue_name)

    assert job_id != "f" * 32
    assert sqlite_queue.push(jobs.Unique("n"), queue=queue_name) == job_id
    assert sqlite_queue.size(queue_name) == 1


def test_a_mariadb_deadlock_outside_a_transaction_is_retried(queue_name: str) -> None:
    """A debounced push holds the key's lock row and waits for the holder's job row, which another transaction
    holds while it waits for the lock row: MariaDB rolls the lighter one, the push, back (1213), and the push,
    made outside a transaction of the caller's, is tried again and replaces the holder's arguments."""
    queue = connections.build("mariadb")
    db = db_connections["mariadb"]
    try:
        holder = queue.push(jobs.Debounced("first"), queue=queue_name)
        lock = lock_of(queue.prepare(jobs.Debounced("x"), queue=queue_name))
        assert lock is not None
        with db.cursor() as cursor:
            cursor.execute("SELECT CONNECTION_ID()")
            pusher = cursor.fetchone()[0]
        holds_the_job = threading.Event()
        other: list[threading.Thread] = []

        def other_transaction() -> None:
            with transaction.atomic(using="mariadb"), db_connections["mariadb"].cursor() as cursor:
                cursor.execute("UPDATE kinetis_queue_jobs SET available_at = available_at WHERE job_id = %s", [holder])
                for n in range(30):  # heavier than the push: the deadlock's victim is the push
                    cursor.execute(
                        "INSERT INTO kinetis_queue_limit_slots (slot_key, slot, holder, expires_at) "
                        "VALUES (%s, %s, '', 0)",
                        [queue_name[:32], n],
                    )
                holds_the_job.set()

                def pusher_replaces() -> bool:  # it is waiting for the holder's row, which this transaction holds
                    cursor.execute(
                        "SELECT COUNT(*) FROM information_schema.processlist WHERE id = %s AND info LIKE %s",
                        [pusher, "UPDATE kinetis_queue_jobs SET args%"],
                    )
                    return bool(cursor.fetchone()[0])

                wait_until(pusher_replaces, 20)
                cursor.execute(
                    "SELECT lock_key FROM kinetis_queue_unique_locks WHERE lock_key = %s FOR UPDATE", [lock.key]
                )
                transaction.set_rollback(True, using="mariadb")

        def start_other() -> None:
            other.append(in_thread(other_transaction))
            assert holds_the_job.wait(20)

        calls: list[str] = []
        with db.execute_wrapper(before_first(REPLACE, start_other, calls)):
            job_id = queue.push(jobs.Debounced("second"), queue=queue_name)
        other[0].join()

        assert len(calls) == 2  # the replace was rolled back by the deadlock, and made again
        assert job_id == holder
        waiting = queue.pop(5, [queue_name])
        assert waiting is not None and (waiting.id, waiting.args["label"]) == (holder, "second")
        queue.ack(waiting)
        assert queue.size(queue_name) == 0
    finally:
        queue.dispose()  # type: ignore[attr-defined]
