"""Delayed pushes on every SQL database, under load: poppable once due, never before (issue 27, item 17).

A job pushed with ``delay=3`` on MariaDB was once still not returned by pop() well after its due time. The
due time is ``available_at``, written by the pusher as its own clock plus the delay; the claim compares it
with the popper's clock. Here delays of 0 to 10 s are pushed while other threads push and pop on another
queue of the same table, and two poppers take the delayed ones: every job is popped (awaited with a bound
generous for a loaded machine), and the database's own clock, read right after the pop returned, is never
before the job's stored due time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections as db_connections

from kinetis_queue.backends.sql import SqlQueue
from tests.jobs import Noop
from tests.support.helpers import in_thread, wait_until

#: The SQL databases of tests/settings.py.
ALIASES = ["default", "postgres", "mariadb"]
#: Seconds of delay pushed, one job each, twice over.
DELAYS = [0, 0, 0.1, 0.25, 0.5, 1, 1.5, 2, 2.5, 3, 3, 4, 5, 6, 7, 8, 9, 10]
#: How long past the longest delay every job may take to be popped on a loaded 2-core machine.
BOUND = 60.0
#: The delay of the held-claim test: the other worker's claim must read the row before it is due.
DUE_IN = 5.0
#: Longest wait for a held claim or its thread.
HOLD = 60.0
#: Each database's clock as epoch seconds, and its resolution (SQLite's 'now' has milliseconds).
CLOCK = {
    "postgresql": ("SELECT extract(epoch FROM clock_timestamp())::float8", 1e-6),
    "mysql": ("SELECT UNIX_TIMESTAMP(SYSDATE(6))", 1e-6),
    "sqlite": ("SELECT (julianday('now') - 2440587.5) * 86400.0", 1e-3),
}


@pytest.fixture(params=ALIASES, ids=["sqlite", "postgres", "mariadb"])
def sql(request: pytest.FixtureRequest, queue_name: str) -> Iterator[SqlQueue]:
    queue = SqlQueue(database=request.param, visibility_timeout=60)
    try:
        yield queue
    finally:
        with db_connections[request.param].cursor() as cursor:
            cursor.execute("DELETE FROM kinetis_queue_jobs WHERE queue IN (%s, %s)", [queue_name, queue_name + "-load"])
        queue.dispose()


def _database_clock(alias: str) -> float:
    with db_connections[alias].cursor() as cursor:
        cursor.execute(CLOCK[db_connections[alias].vendor][0])
        return float(cursor.fetchone()[0])


def _due(alias: str, job_id: str) -> float:
    with db_connections[alias].cursor() as cursor:
        cursor.execute("SELECT available_at FROM kinetis_queue_jobs WHERE job_id = %s", [job_id])
        return float(cursor.fetchone()[0])


def test_delayed_jobs_become_poppable_under_load_and_never_before_their_due_time(
    sql: SqlQueue, queue_name: str
) -> None:
    alias = sql.database
    resolution = CLOCK[db_connections[alias].vendor][1]
    stop = threading.Event()
    popped: dict[str, float] = {}  # job id -> the database's clock right after its pop returned
    lock = threading.Lock()

    def load() -> None:
        """Pushes and pops on another queue of the same table, as a busy deployment has."""
        while not stop.is_set():
            sql.push(Noop(), queue=queue_name + "-load")
            job = sql.pop(0.05, [queue_name + "-load"])
            if job is not None:
                sql.ack(job)

    def popper() -> None:
        while not stop.is_set():
            job = sql.pop(0.2, [queue_name])
            if job is None:
                continue
            seen = _database_clock(alias)
            sql.ack(job)
            with lock:
                popped[job.id] = seen

    threads = [in_thread(load) for _ in range(2)] + [in_thread(popper) for _ in range(2)]
    try:
        due: dict[str, float] = {}
        for delay in DELAYS:
            job_id = sql.push(Noop(), queue=queue_name, delay=delay)
            due[job_id] = _due(alias, job_id) if delay else 0.0  # a due job may be popped at once
        wait_until(lambda: len(popped) == len(DELAYS), timeout=max(DELAYS) + BOUND, interval=0.1)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert set(popped) == set(due)
    early = {job_id: (popped[job_id], due[job_id]) for job_id in due if popped[job_id] < due[job_id] - resolution}
    assert early == {}, "popped before its due time by the database's clock"


def test_a_claim_that_met_a_job_before_its_due_time_does_not_hide_it_once_due(sql: SqlQueue, queue_name: str) -> None:
    """The cause of the MariaDB miss: a claim read the delayed row while it was not due yet and, on InnoDB,
    kept it locked until that claim's transaction ended; every claim in between, the row due by then,
    skipped it (SKIP LOCKED) and answered "nothing to pop". Here the other worker's claim is held open
    right after its first read, as a descheduled thread would hold it on a loaded machine."""
    job_id = sql.push(Noop(), queue=queue_name, delay=DUE_IN)
    other = SqlQueue(database=sql.database, visibility_timeout=60)
    held, resume = threading.Event(), threading.Event()
    swept: list[Any] = []

    def hold_after_first_read(execute: Any, statement: str, params: Any, many: bool, context: Any) -> Any:
        result = execute(statement, params, many, context)
        if statement.startswith(("SELECT", "UPDATE")) and not held.is_set():
            held.set()
            resume.wait(HOLD)
        return result

    def claim() -> None:
        db = other._worker_db()  # opened (and set up) before the wrapper: its first statement is the claim's
        with db.execute_wrapper(hold_after_first_read):
            swept.append(other._sweep((queue_name,)))

    claimer = in_thread(claim)
    try:
        assert held.wait(HOLD)
        job = sql.pop(DUE_IN + BOUND / 3, [queue_name])
    finally:
        resume.set()
        claimer.join(HOLD)
        other.dispose()
    assert swept == [None], "the other claim ran after the due time: nothing is shown (rerun on a quieter machine)"
    assert job is not None and job.id == job_id
    sql.ack(job)


def test_a_due_time_read_back_from_the_database_is_the_one_written(sql: SqlQueue, queue_name: str) -> None:
    """The column keeps the pusher's clock plus the delay exactly (DOUBLE / double precision / REAL): no
    rounding to a coarser type could move a due time later."""
    before = time.time()
    job_id = sql.push(Noop(), queue=queue_name, delay=3)
    stored = _due(sql.database, job_id)
    assert before + 3 <= stored <= time.time() + 3
    any_value: Any = stored
    assert isinstance(any_value, float)
