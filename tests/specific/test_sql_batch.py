"""The SQL backend's batch primitives and unreserve() on SQLite, PostgreSQL and MariaDB (issue 14).

The conformance suite (tests/conformance/test_batch.py) checks what every backend promises; these
tests check what the SQL statements themselves must get right: the attempt count a reclaim or an
unreserve leaves in the row, the fence of each row of a multi-row claim and of a batched ack, and
a bulk push that stays inside the caller's transaction.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from django.db import DatabaseError, transaction
from django.db import connections as db_connections

from kinetis_queue.backends.sql import SqlHandle, SqlQueue
from kinetis_queue.contracts import JobSettlement
from kinetis_queue.exceptions import QueueTablesMissingError, StaleJobHandleError
from tests.jobs import Noop, Records

ALIASES = ["default", "postgres", "mariadb"]


@pytest.fixture(params=ALIASES, ids=["sqlite", "postgres", "mariadb"])
def sql(request: pytest.FixtureRequest, queue_name: str) -> Iterator[SqlQueue]:
    queue = SqlQueue(database=request.param, visibility_timeout=1)
    try:
        yield queue
    finally:
        with db_connections[request.param].cursor() as cursor:
            cursor.execute("DELETE FROM kinetis_queue_jobs WHERE queue IN (%s, %s)", [queue_name, queue_name + "-hi"])
        queue.dispose()


def _row(queue: SqlQueue, job_id: str) -> tuple[int, str | None]:
    with db_connections[queue.database].cursor() as cursor:
        cursor.execute("SELECT attempts, reserved_token FROM kinetis_queue_jobs WHERE job_id = %s", [job_id])
        attempts, token = cursor.fetchone()
    return int(attempts), token


def _expire(queue: SqlQueue, job_id: str) -> None:
    """Make a reservation look older than the visibility timeout, as a holder that stopped renewing."""
    with db_connections[queue.database].cursor() as cursor:
        cursor.execute("UPDATE kinetis_queue_jobs SET reserved_at = reserved_at - 60 WHERE job_id = %s", [job_id])


def test_unreserve_restores_the_row_so_the_next_delivery_has_the_same_attempt(sql: SqlQueue, queue_name: str) -> None:
    job_id = sql.push(Noop(), queue=queue_name)
    first = sql.pop(1, [queue_name])
    assert first is not None and first.attempts == 1

    sql.unreserve(first)

    assert _row(sql, job_id) == (0, None)
    again = sql.pop(5, [queue_name])
    assert again is not None and again.id == job_id and again.attempts == 1
    with pytest.raises(StaleJobHandleError) as refused:
        sql.ack(first)  # the given-back delivery's receipt is dead
    assert refused.value.operation is JobSettlement.ACK
    sql.ack(again)


def test_unreserve_of_a_reclaimed_delivery_keeps_the_attempt_the_reclaim_charged(
    sql: SqlQueue, queue_name: str
) -> None:
    """A reclaim charges the lost holder's attempt (attempts 1, delivery 2); giving delivery 2 back keeps it 2."""
    sql.push(Noop(), queue=queue_name)
    lost = sql.pop(1, [queue_name])
    assert lost is not None
    _expire(sql, lost.id)
    reclaimed = sql.pop(1, [queue_name])
    assert reclaimed is not None and reclaimed.attempts == 2

    sql.unreserve(reclaimed)

    again = sql.pop(5, [queue_name])
    assert again is not None and again.attempts == 2
    sql.ack(again)


def test_unreserve_is_fenced(sql: SqlQueue, queue_name: str) -> None:
    job_id = sql.push(Records("x"), queue=queue_name)
    held = sql.pop(1, [queue_name])
    assert held is not None
    sql.unreserve(held)
    again = sql.pop(5, [queue_name])
    assert again is not None

    with pytest.raises(StaleJobHandleError) as refused:
        sql.unreserve(held)

    assert refused.value.operation is JobSettlement.UNRESERVE
    assert _row(sql, job_id)[1] is not None  # the live reservation was not touched
    sql.ack(again)


def test_a_multi_row_claim_gives_each_row_its_own_token_and_each_is_fenced(sql: SqlQueue, queue_name: str) -> None:
    """pop_many(): one claim, one token per row; a delivery reclaimed by another holder is refused in place."""
    sql.push_many([Records(f"job-{i}") for i in range(4)], queue=queue_name)
    held = sql.pop_many(1, [queue_name], 4).jobs
    assert len(held) == 4
    assert len({job.handle.token for job in held}) == 4
    assert [job.handle.row_id for job in held] == sorted(job.handle.row_id for job in held)
    _expire(sql, held[2].id)
    taken_over = sql.pop(5, [queue_name])
    assert taken_over is not None and taken_over.id == held[2].id and taken_over.attempts == 2

    results = sql.ack_many(held)

    assert results[:2] == [None, None] and results[3] is None
    assert isinstance(results[2], StaleJobHandleError) and results[2].operation is JobSettlement.ACK
    assert _row(sql, held[2].id)[1] == taken_over.handle.token  # the new holder's row is untouched
    assert sql.ack_many([taken_over]) == [None]
    assert sql.size(queue_name) == 0


def test_ack_many_matches_id_and_token_of_the_same_receipt(sql: SqlQueue, queue_name: str) -> None:
    """Receipts whose tokens are swapped between two held rows name no held delivery: nothing is deleted."""
    sql.push_many([Noop(), Noop()], queue=queue_name)
    first, second = sql.pop_many(1, [queue_name], 2).jobs
    forged = [
        replace(first, handle=SqlHandle(first.handle.row_id, second.handle.token)),
        replace(second, handle=SqlHandle(second.handle.row_id, first.handle.token)),
    ]

    results = sql.ack_many(forged)

    assert all(isinstance(result, StaleJobHandleError) for result in results)
    assert sql.stats(queue_name).reserved == 2
    assert sql.ack_many([first, second]) == [None, None]


def test_ack_many_acks_a_job_listed_twice_once(sql: SqlQueue, queue_name: str) -> None:
    sql.push(Noop(), queue=queue_name)
    held = sql.pop(1, [queue_name])
    assert held is not None
    results = sql.ack_many([held, held])
    assert results[0] is None and isinstance(results[1], StaleJobHandleError)


def test_ack_many_is_one_statement_per_batch(sql: SqlQueue, queue_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One DELETE for 40 jobs (SQLite and MariaDB: one per ACK_CHUNK jobs, so more than one past it)."""
    sql.push_many([Noop() for _ in range(40)], queue=queue_name)
    held = sql.pop_many(1, [queue_name], 40).jobs
    assert len(held) == 40
    statements: list[str] = []
    db = sql._worker_db()

    def record(execute: Any, query: str, params: Any, many: bool, context: Any) -> Any:
        statements.append(query)
        return execute(query, params, many, context)

    with db.execute_wrapper(record):
        assert sql.ack_many(held) == [None] * 40
    assert len(statements) == 1 and statements[0].startswith("DELETE")
    assert sql.size(queue_name) == 0


def test_ack_many_past_one_chunk_acks_every_job(
    sql: SqlQueue, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("kinetis_queue.backends.sql.queue.ACK_CHUNK", 3)
    sql.push_many([Noop() for _ in range(7)], queue=queue_name)
    held = sql.pop_many(1, [queue_name], 7).jobs
    sql.ack(held[4])
    results = sql.ack_many(held)
    assert [result is None for result in results] == [True] * 4 + [False] + [True] * 2
    assert sql.size(queue_name) == 0


def test_a_malformed_row_in_a_multi_row_claim_is_removed_and_reported(sql: SqlQueue, queue_name: str) -> None:
    ids = sql.push_many([Records(f"job-{i}") for i in range(3)], queue=queue_name)
    with db_connections[sql.database].cursor() as cursor:
        cursor.execute("UPDATE kinetis_queue_jobs SET args = %s WHERE job_id = %s", ["not json", ids[1]])

    reserved = sql.pop_many(1, [queue_name], 3)

    assert [job.id for job in reserved.jobs] == [ids[0], ids[2]]
    assert len(reserved.malformed) == 1
    assert sql.stats(queue_name).reserved == 2 and sql.size(queue_name) == 0
    assert sql.ack_many(reserved.jobs) == [None, None]
    with db_connections[sql.database].cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM kinetis_queue_jobs WHERE queue = %s", [queue_name])
        assert cursor.fetchone()[0] == 0


def test_pop_many_takes_the_higher_priority_queue_first_within_one_claim(sql: SqlQueue, queue_name: str) -> None:
    low, high = queue_name, queue_name + "-hi"
    sql.push_many([Records(f"low-{i}") for i in range(3)], queue=low)
    sql.push_many([Records(f"high-{i}") for i in range(2)], queue=high)
    reserved = sql.pop_many(1, [high, low], 4).jobs
    assert [job.args["label"] for job in reserved] == ["high-0", "high-1", "low-0", "low-1"]
    assert sql.ack_many(reserved) == [None] * 4


def test_push_many_inside_a_rolled_back_atomic_block_stores_nothing(sql: SqlQueue, queue_name: str) -> None:
    with pytest.raises(ZeroDivisionError), transaction.atomic(using=sql.database):
        sql.push_many([Noop() for _ in range(5)], queue=queue_name)
        assert sql.size(queue_name) == 5  # visible inside the caller's transaction
        1 / 0  # noqa: B018
    assert sql.size(queue_name) == 0


def test_push_many_inside_a_committed_atomic_block_is_stored_with_it(sql: SqlQueue, queue_name: str) -> None:
    with transaction.atomic(using=sql.database):
        ids = sql.push_many([Noop() for _ in range(3)], queue=queue_name)
    held = sql.pop_many(1, [queue_name], 3).jobs
    assert [job.id for job in held] == ids


@contextmanager
def _statements(sql: SqlQueue, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The statements run on Django's connection for the queue's alias: through Django's cursors and,
    on PostgreSQL, the psycopg cursor the push fast paths keep (which Django's wrappers never see)."""
    statements: list[str] = []
    if db_connections[sql.database].vendor == "postgresql":
        real = psycopg.Cursor.execute

        def spy(self: psycopg.Cursor[Any], query: Any, params: Any = None, **kwargs: Any) -> Any:
            statements.append(str(query))
            return real(self, query, params, **kwargs)

        monkeypatch.setattr(psycopg.Cursor, "execute", spy)
        yield statements
        return

    def record(execute: Any, query: str, params: Any, many: bool, context: Any) -> Any:
        statements.append(query)
        return execute(query, params, many, context)

    with db_connections[sql.database].execute_wrapper(record):
        yield statements


def test_push_many_is_one_insert_per_chunk_and_keeps_the_order(
    sql: SqlQueue, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("kinetis_queue.backends.sql.queue.PUSH_CHUNK", 3)
    with _statements(sql, monkeypatch) as statements:
        ids = sql.push_many([Records(f"job-{i}") for i in range(7)], queue=queue_name, delay=0)

    assert sum(query.startswith("INSERT") for query in statements) == 3
    held = sql.pop_many(1, [queue_name], 7).jobs
    assert [job.id for job in held] == ids
    assert [job.args["label"] for job in held] == [f"job-{i}" for i in range(7)]


def test_push_many_respects_the_databases_parameter_ceiling(
    sql: SqlQueue, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ceiling of 20 parameters allows 2 rows of 9 per INSERT: 5 jobs take 3 statements (PostgreSQL
    sends nine arrays, so one statement whatever the ceiling)."""
    features = db_connections[sql.database].features
    monkeypatch.setattr(type(features), "max_query_params", 20)
    monkeypatch.delitem(features.__dict__, "max_query_params", raising=False)  # a cached_property's value
    with _statements(sql, monkeypatch) as statements:
        sql.push_many([Noop() for _ in range(5)], queue=queue_name)
    expected = 1 if db_connections[sql.database].vendor == "postgresql" else 3
    assert sum(query.startswith("INSERT") for query in statements) == expected
    assert sql.size(queue_name) == 5


def test_postgresql_push_many_under_debug_goes_through_djangos_cursor_and_is_logged(queue_name: str) -> None:
    db = db_connections["postgres"]
    db.force_debug_cursor = True
    queue = SqlQueue(database="postgres")
    try:
        db.queries_log.clear()
        ids = queue.push_many([Noop(), Noop()], queue=queue_name)
        assert any(q["sql"].startswith("INSERT INTO kinetis_queue_jobs") for q in db.queries)
    finally:
        db.force_debug_cursor = False
    assert [job.id for job in queue.pop_many(1, [queue_name], 2).jobs] == ids
    assert queue.clear(queue_name) == 0  # both reserved, none waiting
    with db.cursor() as cursor:
        cursor.execute("DELETE FROM kinetis_queue_jobs WHERE queue = %s", [queue_name])
    queue.dispose()


def test_concurrent_multi_row_claims_never_share_a_row(sql: SqlQueue, queue_name: str) -> None:
    """Four threads on one queue object, each claiming 8 at a time: every job delivered exactly once."""
    ids = sql.push_many([Noop() for _ in range(120)], queue=queue_name)
    delivered: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def claim() -> None:
        try:
            while True:
                held = sql.pop_many(0.3, [queue_name], 8).jobs
                if not held:
                    return
                assert sql.ack_many(held) == [None] * len(held)
                with lock:
                    delivered.extend(job.id for job in held)
        except BaseException as exc:  # reported below: a thread's assertion must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=claim) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert sorted(delivered) == sorted(ids)


@pytest.fixture
def unmigrated_postgres_schema() -> Iterator[str]:
    """A PostgreSQL schema without the tables, searched first by the test's connection (an unmigrated database)."""
    db = db_connections["postgres"]
    schema = "kq_unmigrated_push_many"
    with db.cursor() as cursor:
        cursor.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")
    try:
        yield schema
    finally:
        db.close()  # drops the search_path the test set on the session
        with db.cursor() as cursor:
            cursor.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def test_push_many_on_an_unmigrated_database_says_the_tables_are_missing(unmigrated_postgres_schema: str) -> None:
    queue = SqlQueue(database="postgres")
    with db_connections["postgres"].cursor() as cursor:
        cursor.execute(f"SET search_path TO {unmigrated_postgres_schema}")
    try:
        with pytest.raises(QueueTablesMissingError, match=r"kinetis_queue_jobs.*migrate --database postgres"):
            queue.push_many([Noop(), Noop()])
    finally:
        queue.dispose()


def test_push_many_passes_on_a_database_error_that_is_not_a_missing_table(queue_name: str) -> None:
    """In a transaction an earlier statement broke, the INSERT fails for that reason: raised as the database said."""
    queue = SqlQueue(database="postgres")
    db = db_connections["postgres"]
    try:
        with transaction.atomic(using="postgres"):
            with pytest.raises(DatabaseError), db.cursor() as cursor:
                cursor.execute("SELECT 1 / 0")
            with pytest.raises(DatabaseError, match="current transaction is aborted") as raised:
                queue.push_many([Noop()], queue=queue_name)
            transaction.set_rollback(True, using="postgres")
        assert not isinstance(raised.value, QueueTablesMissingError)
        assert queue.size(queue_name) == 0
    finally:
        queue.dispose()


def test_the_poll_pause_can_be_set_on_a_built_queue() -> None:
    """The worker's loop reads ``poll_pause``; a value set on the queue replaces the database's default."""
    for database in ALIASES:
        queue = SqlQueue(database=database)
        queue.poll_pause = 0.25
        assert queue.poll_pause == 0.25
        queue.dispose()
