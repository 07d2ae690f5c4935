"""Issue 27 item 1: the registry's stalled flag on every store: a worker with no free slot is busy, paused
queues and deferred jobs (limits, snoozes) hold no ready job, a deferral is activity, and every age is
read on the database's clock, never the reader's or the worker's."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest

from kinetis_queue.contracts import Queue, QueuedJob
from kinetis_queue.control import pause, resume
from kinetis_queue.limits import slot_key, slot_store_of
from kinetis_queue.models import WorkerRecord
from kinetis_queue.observability import registry, status
from kinetis_queue.observability.registry import STALLED_AFTER, WorkerRegistry, database_clock, ready_jobs, workers
from kinetis_queue.outcomes import JobOutcome, JobReport
from kinetis_queue.worker import Worker
from tests import jobs, operator_jobs
from tests.support.backends import Backend


@pytest.fixture(autouse=True)
def _empty_registry() -> None:
    WorkerRecord.objects.all().delete()


@pytest.fixture
def held_limit(connection: Queue) -> Iterator[None]:
    """OneAtATimeSlowly's only slot, held by someone else for the test: its deliveries are deferred."""
    limit = operator_jobs.OneAtATimeSlowly.concurrency_limit
    assert limit is not None
    store = slot_store_of(connection)
    slot = store.acquire(
        slot_key(connection.connection, limit.key_of(operator_jobs.OneAtATimeSlowly())), 1, uuid.uuid4().hex, 600
    )
    assert slot is not None
    yield
    store.release(slot)


def _row(connection: str, queues: list[str], **fields: Any) -> str:
    """A registry row of a live worker idle since well before STALLED_AFTER, on the database's clock."""
    now = database_clock()
    values = {
        "id": uuid.uuid4().hex,
        "host": "h",
        "pid": 1,
        "connection": connection,
        "queues": ",".join(queues),
        "concurrency": 1,
        "started_at": now - 10 * STALLED_AFTER,
        "last_started": now - 2 * STALLED_AFTER,
        "last_seen": now,
        **fields,
    }
    return str(WorkerRecord.objects.create(**values).pk)


def _run(connection: Queue, queue: str, hooks: Any = None) -> list[JobReport]:
    """One delivery of ``queue`` by a worker of ``connection``; its reports."""
    reports: list[JobReport] = []
    worker = Worker(connection, recorder=None, reporter=reports.append, hooks=hooks)
    try:
        assert worker.process_next(10, [queue]) is True
    finally:
        worker.close()
    return reports


def _running(n: int) -> str:
    return json.dumps([{"id": uuid.uuid4().hex, "job": "j", "queue": "q", "started": 0} for _ in range(n)])


def test_busy_paused_and_deferred_workers_are_not_stalled_and_an_idle_one_beside_ready_jobs_is(
    connection: Queue, backend: Backend, queue_name: str, held_limit: None
) -> None:
    if not backend.stores_jobs:
        pytest.skip("sync: nothing waits, so no worker of it is ever stalled")
    name = backend.connection
    ready, paused, snoozed, deferred = (
        queue_name,
        f"{queue_name}-paused",
        f"{queue_name}-snoozed",
        f"{queue_name}-limited",
    )
    connection.push(jobs.Noop(), queue=ready)
    connection.push(jobs.Noop(), queue=paused)
    connection.push(operator_jobs.SnoozesTenMinutes(), queue=snoozed)
    connection.push(operator_jobs.OneAtATimeSlowly(), queue=deferred)
    assert [r.outcome for r in _run(connection, snoozed)] == [JobOutcome.SNOOZED]
    assert [r.outcome for r in _run(connection, deferred)] == [JobOutcome.DEFERRED]
    pause(paused, name)
    try:
        figures = status.collect(name, [ready, paused, snoozed, deferred])
        assert figures[0].error is None
        rows = {
            "idle beside ready jobs": _row(name, [ready]),
            "every slot busy": _row(name, [ready], concurrency=2, running=_running(2)),
            "one slot of two busy": _row(name, [ready], concurrency=2, running=_running(1)),
            "paused queue": _row(name, [paused]),
            "snoozed job": _row(name, [snoozed]),
            "deferred job": _row(name, [deferred]),
        }
        states = {w.id: w.state for w in workers(name, ready=ready_jobs(figures))}
    finally:
        resume(paused, name)
    assert {label: states[pk] for label, pk in rows.items()} == {
        "idle beside ready jobs": "stalled",
        "every slot busy": "busy",
        "one slot of two busy": "stalled",
        "paused queue": "alive",
        "snoozed job": "alive",
        "deferred job": "alive",
    }


def test_a_worker_that_only_defers_deliveries_is_consuming_not_stalled(
    connection: Queue, backend: Backend, queue_name: str, held_limit: None
) -> None:
    """Its queues hold ready jobs it gives back at their limit: each deferral is activity."""
    if not backend.stores_jobs:
        pytest.skip("sync: nothing is ever deferred")
    name = backend.connection
    limited = f"{queue_name}-limited"
    connection.push(jobs.Noop(), queue=queue_name)  # ready, for another worker to take
    connection.push(operator_jobs.OneAtATimeSlowly(), queue=limited)
    entry = WorkerRegistry(name, [queue_name, limited], 1)
    entry.started_at -= 10 * STALLED_AFTER  # started long ago, and never started a job since
    [report] = _run(connection, limited)
    assert report.outcome is JobOutcome.DEFERRED
    entry.reported(cast(QueuedJob, None), report)  # what its worker's hooks are told of the delivery
    entry._write()
    figures = status.collect(name, [queue_name, limited])
    [found] = workers(name, ready=ready_jobs(figures))
    assert found.state == "alive"
    assert found.processed == 0  # a deferral is activity, not a job done


class _SkewedClock:
    """A ``time`` module whose wall clock is ``skew`` seconds off."""

    def __init__(self, skew: float) -> None:
        self.skew = skew

    def time(self) -> float:
        return time.time() + self.skew

    def monotonic(self) -> float:
        return time.monotonic()


def test_ages_are_read_on_the_database_clock_whatever_the_worker_or_reader_clock_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A worker an hour ahead writes its row; a reader an hour behind sees it alive, not stalled nor gone."""
    monkeypatch.setattr(registry, "time", _SkewedClock(3600))
    entry = WorkerRegistry("sqlite", ["default"], 1)
    entry._write()
    monkeypatch.setattr(registry, "time", _SkewedClock(-3600))
    [found] = workers("sqlite", ready={"sqlite/default": 5})
    assert found.state == "alive"
    now = database_clock()
    assert abs(found.last_seen - now) < GRACE and abs(found.started_at - now) < GRACE  # written on its clock


#: How far apart two readings of the database's clock within one test may be (generous: a loaded machine).
GRACE = 10.0


@pytest.mark.parametrize("alias", ["default", "postgres", "mariadb"])
def test_the_database_clock_reads_unix_seconds_on_every_sql_database(alias: str) -> None:
    """The registry's one clock, on each database a project may keep it in (all on this host's clock here)."""
    assert abs(database_clock(alias) - time.time()) < 60
