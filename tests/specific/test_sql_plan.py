"""Plan stability: the claim reads its index whatever the planner statistics say (issue 14).

The normal life of a queue table: analyzed while nearly empty (a few reserved rows), then a burst
of jobs. With those statistics PostgreSQL believes almost nothing is ready, and a claim shaped as a
plain ``ORDER BY id LIMIT 1`` scans and sorts every ready row. The PostgreSQL test rebuilds that
situation in a temporary table that shadows the jobs table on the worker's own connection
(autovacuum never analyzes a temporary table, so the statistics stay stale), checks that the old
shape does get the bad plan there, and that the claim on that connection does not. MariaDB and
SQLite: their per-queue SELECTs use the claim index and sort nothing.

Issue 19 ordered each queue by priority (highest first), then id: the index became (queue, priority
DESC, id), and the claim's ORDER BY its order. The same checks hold for that order, and on a burst of
mixed priorities the claim reserves the highest first with neither a sort nor a scan.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from django.db import connections as db_connections

from kinetis_queue.backends.sql import SqlQueue
from kinetis_queue.backends.sql.claim import CANDIDATES, LOCK_CANDIDATES, ORDER, SQLITE_PART, postgresql_claim

#: The claim before issue 14: one queue, ORDER BY id LIMIT 1 (the regression's query shape).
OLD_CLAIM = (
    "UPDATE kinetis_queue_jobs SET reserved_at = %s WHERE id = (SELECT id FROM kinetis_queue_jobs "
    "WHERE queue = %s AND available_at <= %s AND (reserved_at IS NULL OR reserved_at <= %s) "
    "ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)"
)
INSERT = (
    "INSERT INTO kinetis_queue_jobs (job_id, queue, job_class, args, metadata, attempts, pushed_at, "
    "available_at, reserved_at, reserved_token, priority) "
)
#: The claim's index (models.QueuedJobRecord).
INDEX = "kinetis_queue_jobs_claim"


@pytest.fixture
def stale_postgres() -> Iterator[SqlQueue]:
    """A queue whose worker connection sees a jobs table analyzed with 3 reserved rows, then given 5,000 ready ones."""
    queue = SqlQueue(database="postgres", visibility_timeout=300)
    db = queue._worker_db()
    try:
        now = time.time()
        with db.cursor() as cursor:
            cursor.execute("CREATE TEMP TABLE kinetis_queue_jobs (LIKE public.kinetis_queue_jobs INCLUDING ALL)")
            cursor.execute(
                INSERT + "SELECT md5(g::text), 'burst', 'tests.jobs.Noop', '{}', '{}', 0, %s, %s, %s + g, "
                "md5(g::text), 0 FROM generate_series(1, 3) g",
                [now - 60, now - 60, now - 30],  # three live reservations, taken a moment ago
            )
            cursor.execute("ANALYZE pg_temp.kinetis_queue_jobs")
            cursor.execute("DELETE FROM pg_temp.kinetis_queue_jobs")
            cursor.execute(
                # Mixed priorities: every seventh job at 5, every eleventh at -5, the rest at 0.
                INSERT + "SELECT md5((g + 10)::text), 'burst', 'tests.jobs.Noop', '{}', '{}', 0, %s, %s, NULL, NULL, "
                "CASE WHEN g %% 7 = 0 THEN 5 WHEN g %% 11 = 0 THEN -5 ELSE 0 END FROM generate_series(1, 5000) g",
                [now, now],
            )
        yield queue
    finally:
        with db.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS pg_temp.kinetis_queue_jobs")
        queue.dispose()


def _plan(queue: SqlQueue, sql: str, params: list[object], *, default_planner: bool = False) -> str:
    db = queue._worker_db()
    with db.cursor() as cursor:
        if default_planner:
            cursor.execute("SET enable_seqscan TO on; SET enable_bitmapscan TO on")
        try:
            cursor.execute("EXPLAIN " + sql, params)
            return "\n".join(row[0] for row in cursor.fetchall())
        finally:
            if default_planner:
                cursor.execute("SET enable_seqscan TO off; SET enable_bitmapscan TO off")


@pytest.mark.parametrize("queues", [("burst",), ("high", "burst", "low")], ids=["one-queue", "three-queues"])
@pytest.mark.parametrize("limit", [1, 32])
@pytest.mark.parametrize("default_planner", [False, True], ids=["worker-session", "shape-alone"])
def test_postgresql_claim_uses_the_queue_index_with_stale_statistics(
    stale_postgres: SqlQueue, queues: tuple[str, ...], limit: int, default_planner: bool
) -> None:
    """On the worker's session (scans disabled) and, the query shape alone, with the planner's defaults."""
    now = time.time()
    old = _plan(stale_postgres, OLD_CLAIM, [now, "burst", now, now - 300], default_planner=True)
    assert "Seq Scan" in old and "Sort" in old, old  # the situation is real: the old shape scans and sorts

    sql, params = postgresql_claim(queues, limit, now, now - 300)
    plan = _plan(stale_postgres, sql, params, default_planner=default_planner)

    assert "Index Cond: ((queue)::text = wanted.name)" in plan, plan
    assert "Seq Scan" not in plan and "Bitmap" not in plan and "Sort" not in plan, plan


def test_postgresql_claim_on_the_stale_table_reserves_in_order(stale_postgres: SqlQueue) -> None:
    """The highest priority first (the burst's jobs at 5), each priority in id order."""
    db = stale_postgres._worker_db()
    with db.cursor() as cursor:
        cursor.execute("SELECT id FROM pg_temp.kinetis_queue_jobs WHERE priority = 5 ORDER BY id LIMIT 3")
        expected = [row[0] for row in cursor.fetchall()]

    reserved = stale_postgres.pop_many(5, ["burst"], 3)

    assert [job.handle.row_id for job in reserved.jobs] == expected
    assert len(reserved.jobs) == 3


def test_mariadb_claim_reads_the_queue_index_without_a_filesort_and_locks_by_primary_key(queue_name: str) -> None:
    now = time.time()
    with db_connections["mariadb"].cursor() as cursor:
        cursor.execute("ANALYZE TABLE kinetis_queue_jobs")
        cursor.fetchall()
        plans = []
        for statement, params in [
            (CANDIDATES, [queue_name, now, now - 300, 32]),
            (LOCK_CANDIDATES.format("%s, %s"), [1, 2, now, now - 300]),
        ]:
            cursor.execute("EXPLAIN " + statement, params)
            columns = [column[0] for column in cursor.description]
            plans.append([dict(zip(columns, row, strict=True)) for row in cursor.fetchall()])
    candidates, locking = plans
    assert [row["key"] for row in candidates] == [INDEX], candidates
    assert "filesort" not in (candidates[0]["Extra"] or ""), candidates
    assert f"ORDER BY {ORDER} LIMIT" in CANDIDATES and "FOR UPDATE" not in CANDIDATES
    assert [row["key"] for row in locking] == ["PRIMARY"], locking
    assert "ORDER BY" not in LOCK_CANDIDATES


def test_sqlite_claim_reads_the_queue_index_without_a_temporary_sort(queue_name: str) -> None:
    now = time.time()
    part = f"SELECT id FROM ({SQLITE_PART})"
    with db_connections["default"].cursor() as cursor:
        cursor.execute(
            f"EXPLAIN QUERY PLAN {part} UNION ALL {part}",
            [queue_name, now, now, 32, queue_name + "-lo", now, now, 32],
        )
        plan = " | ".join(str(row[-1]) for row in cursor.fetchall())
    assert f"USING INDEX {INDEX}" in plan, plan
    assert "TEMP B-TREE" not in plan, plan
