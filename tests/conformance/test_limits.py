"""Concurrency limits on every storing backend (kinetis_queue.limits, docs/limits.md): a delivery whose key is at
its limit is given back unstarted, no attempt charged, and runs once a slot is free; slots are fenced leases."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from kinetis_queue import JobContext, limit_concurrency
from kinetis_queue.contracts import Queue, RenewableQueue
from kinetis_queue.exceptions import StaleJobHandleError
from kinetis_queue.limits import slot_key, slot_store_of
from kinetis_queue.outcomes import JobOutcome, JobReport
from kinetis_queue.worker import Worker
from tests import jobs
from tests.support.helpers import wait_until

pytestmark = pytest.mark.trait("stores_jobs")


@pytest.fixture(autouse=True)
def _calls() -> None:
    jobs.CALLS.clear()


def test_a_delivery_at_its_limit_is_given_back_unstarted_and_runs_once_a_slot_is_free(
    connection: Queue, queue_name: str
) -> None:
    """While the first OneAtATime runs, a second worker takes the other one: deferred, handle() not called;
    once the first ended, the second runs with attempt 1 (the deferral charged nothing)."""
    first = connection.push(jobs.OneAtATime(), queue=queue_name)
    second = connection.push(jobs.OneAtATime(), queue=queue_name)
    other_reports: list[JobReport] = []
    other = Worker(connection, recorder=None, reporter=other_reports.append)

    def meanwhile(context: JobContext) -> None:
        jobs.CALLBACK[:] = [lambda context: None]
        assert other.process_next(10, [queue_name]) is True

    jobs.CALLBACK[:] = [meanwhile]
    reports: list[JobReport] = []
    worker = Worker(connection, recorder=None, reporter=reports.append)
    try:
        assert worker.process_next(10, [queue_name]) is True
        assert [(r.job_id, r.outcome) for r in reports] == [(first, JobOutcome.SUCCEEDED)]
        assert [(r.job_id, r.outcome, r.attempt) for r in other_reports] == [(second, JobOutcome.DEFERRED, 1)]
        assert other_reports[0].delay == 0.2
        assert [c for c in jobs.CALLS if c[0] == "CallsBack"] == [("CallsBack", 1)]

        wait_until(lambda: worker.process_next(1, [queue_name]) and reports[-1].job_id == second, 30)
    finally:
        worker.close()
        other.close()
    assert reports[-1].outcome is JobOutcome.SUCCEEDED and reports[-1].attempt == 1
    assert connection.size(queue_name) == 0


def test_unreserve_with_a_delay_gives_the_delivery_back_later_with_its_attempt(
    connection: Queue, queue_name: str
) -> None:
    job_id = connection.push(jobs.Noop(), queue=queue_name, max_attempts=3)
    held = connection.pop(10, [queue_name])
    assert held is not None and held.id == job_id
    given_back_at = time.monotonic()

    connection.unreserve(held, 1.5)

    again = wait_until(lambda: connection.pop(1, [queue_name]), 30)
    assert time.monotonic() - given_back_at >= 1.0  # not before its delay (whole seconds on SQS and RabbitMQ)
    assert (again.id, again.attempts) == (job_id, 1)
    connection.ack(again)


@pytest.mark.trait("fenced")
def test_a_stale_unreserve_with_a_delay_writes_nothing(connection: Queue, queue_name: str) -> None:
    connection.push(jobs.Noop(), queue=queue_name)
    held = connection.pop(10, [queue_name])
    assert held is not None
    connection.ack(held)
    with pytest.raises(StaleJobHandleError):
        connection.unreserve(held, 1)
    assert connection.size(queue_name) == 0


def test_slots_are_fenced_leases(connection: Queue) -> None:
    """Two slots of a key at a limit of two; a third waits; a holder whose lease ended loses its slot to the next
    taker, and its release then frees nothing."""
    store = slot_store_of(connection)
    key = slot_key(connection.connection, f"test-{uuid.uuid4().hex}")
    a = store.acquire(key, 2, "a" * 32, 60)
    b = store.acquire(key, 2, "b" * 32, 0.3)
    assert a is not None and b is not None
    assert store.acquire(key, 2, "c" * 32, 60) is None

    c = wait_until(lambda: store.acquire(key, 2, "c" * 32, 60), 10)  # b's lease ended: its slot is free again
    store.release(b)  # b no longer holds anything: frees nothing
    assert store.acquire(key, 2, "d" * 32, 60) is None
    store.renew(b, 60)  # nor does its renewal take a slot back
    assert store.acquire(key, 2, "d" * 32, 60) is None

    store.release(a)
    d = store.acquire(key, 2, "d" * 32, 60)
    assert d is not None
    store.release(c)
    store.release(d)


def test_a_callable_key_limits_per_value(connection: Queue, queue_name: str) -> None:
    """PerCustomer allows two per customer: with two slots of customer 1 held elsewhere, customer 1 waits and
    customer 2 runs."""
    store = slot_store_of(connection)
    lease = float(connection.visibility_timeout()) if isinstance(connection, RenewableQueue) else 60.0
    key = slot_key(connection.connection, "tests.jobs.PerCustomer\0customer:1")
    held = [store.acquire(key, 2, uuid.uuid4().hex, lease * 30) for _ in range(2)]
    assert all(held)
    connection.push(jobs.PerCustomer(1), queue=queue_name)
    connection.push(jobs.PerCustomer(2), queue=queue_name)
    reports: list[JobReport] = []
    worker = Worker(connection, recorder=None, reporter=reports.append)
    try:
        assert worker.process_next(10, [queue_name]) is True
        assert worker.process_next(10, [queue_name]) is True
    finally:
        worker.close()
    assert sorted(r.outcome for r in reports) == [JobOutcome.DEFERRED, JobOutcome.SUCCEEDED]
    assert [c[1] for c in jobs.CALLS if c[0] == "PerCustomer"] == [2]
    for slot in held:
        assert slot is not None
        store.release(slot)


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_key_that_raises_is_the_jobs_own_failure_without_its_message(connection: Queue, queue_name: str) -> None:
    connection.push(jobs.KeyRaises(), queue=queue_name, max_attempts=1)
    reports: list[JobReport] = []
    worker = Worker(connection, recorder=None, reporter=reports.append)
    try:
        assert worker.process_next(10, [queue_name]) is True
    finally:
        worker.close()
    assert [(r.outcome, r.error) for r in reports] == [(JobOutcome.FAILED, "InvalidQueueArgumentError")]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max": 0}, "max=...\\) must be an int from 1"),
        ({"max": True}, "max=...\\) must be an int from 1"),
        ({"max": 2, "key": ""}, "key=...\\) must be 1 to"),
        ({"max": 2, "key": 5}, "takes a str or a callable"),
        ({"max": 2, "delay": 0}, "delay=...\\) must be a number"),
    ],
)
def test_bad_limits_are_refused_when_the_class_is_decorated(options: dict[str, Any], message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        limit_concurrency(**options)


def test_a_slot_store_that_fails_defers_the_delivery_instead_of_failing_it(
    queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The slots table of the sqlite connection's database is gone for a moment: the delivery is given back for
    STORE_FAILURE_DELAY seconds, not run and not failed (the job is not at fault), and a warning says why."""
    from django.db import connections as db_connections

    from kinetis_queue import queues
    from kinetis_queue.limits import STORE_FAILURE_DELAY

    queue = queues["sqlite"]
    job_id = queue.push(jobs.OneAtATime(), queue=queue_name, max_attempts=1)
    reports: list[JobReport] = []
    worker = Worker(queue, recorder=None, reporter=reports.append)
    with db_connections["default"].cursor() as cursor:
        cursor.execute("ALTER TABLE kinetis_queue_limit_slots RENAME TO kinetis_queue_limit_slots_away")
    try:
        assert worker.process_next(10, [queue_name]) is True
    finally:
        with db_connections["default"].cursor() as cursor:
            cursor.execute("ALTER TABLE kinetis_queue_limit_slots_away RENAME TO kinetis_queue_limit_slots")
        worker.close()
    assert [(r.job_id, r.outcome, r.delay) for r in reports] == [(job_id, JobOutcome.DEFERRED, STORE_FAILURE_DELAY)]
    assert jobs.CALLS == []
    assert "the store of its concurrency slots or unique lock failed (OperationalError" in caplog.text
    assert queue.stats(queue_name).delayed == 1
