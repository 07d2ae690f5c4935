"""The PostgreSQL push fast path: a prepared INSERT on Django's own connection, nothing else changed."""

from __future__ import annotations

import pytest
from django.db import connections as db_connections
from django.db import transaction

from kinetis_queue import connections
from kinetis_queue.backends.sql import SqlQueue
from tests.jobs import Noop


def _prepared_inserts() -> int:
    with db_connections["postgres"].cursor() as cursor:
        cursor.execute(
            "SELECT COUNT(*) FROM pg_prepared_statements WHERE statement LIKE 'INSERT INTO kinetis_queue_jobs%%'"
        )
        return int(cursor.fetchone()[0])


def test_push_prepares_its_insert_and_leaves_djangos_queries_unprepared(queue_name: str) -> None:
    queue = connections.build("postgres")
    db_connections["postgres"].close()
    queue.push(Noop(), queue=queue_name)
    queue.push(Noop(), queue=queue_name)
    assert _prepared_inserts() == 1
    assert db_connections["postgres"].connection.prepare_threshold is None
    assert queue.size(queue_name) == 2
    assert queue.clear(queue_name) == 2


def test_push_fast_path_joins_the_callers_transaction(queue_name: str) -> None:
    queue = connections.build("postgres")
    with pytest.raises(ZeroDivisionError):
        with transaction.atomic(using="postgres"):
            queue.push(Noop(), queue=queue_name)
            1 / 0  # noqa: B018
    assert queue.size(queue_name) == 0


def test_under_debug_the_push_goes_through_djangos_cursor_and_is_logged(queue_name: str) -> None:
    db = db_connections["postgres"]
    db.force_debug_cursor = True
    try:
        db.queries_log.clear()
        connections.build("postgres").push(Noop(), queue=queue_name)
        assert any("INSERT INTO kinetis_queue_jobs" in q["sql"] for q in db.queries)
    finally:
        db.force_debug_cursor = False


def test_prepared_statements_can_be_turned_off(queue_name: str) -> None:
    queue = SqlQueue(database="postgres", prepared_statements=False)
    db_connections["postgres"].close()
    queue.push(Noop(), queue=queue_name)
    assert _prepared_inserts() == 0
    assert queue.clear(queue_name) == 1
