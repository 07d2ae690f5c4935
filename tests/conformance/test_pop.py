"""Conformance: pop() on every backend (contract: "The pop() priority/timeout contract", "Queue names")."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connections as db_connections

from kinetis_queue.contracts import Queue, QueuedJob
from kinetis_queue.exceptions import InvalidQueueArgumentError
from tests.jobs import Noop, Records
from tests.support.backends import Backend


def _drain(connection: Queue, queues: list[str]) -> list[QueuedJob]:
    """Pop and ack until a short look finds nothing; return the deliveries in order."""
    delivered = []
    while (job := connection.pop(0.3, queues)) is not None:
        delivered.append(job)
        connection.ack(job)
    return delivered


@pytest.mark.trait("stores_jobs")
def test_priority_is_list_order(connection: Queue, queue_name: str) -> None:
    """Contract: The pop() priority/timeout contract (each sweep checks the queues in list order)."""
    high, low = f"{queue_name}-high", f"{queue_name}-low"
    low_id = connection.push(Records("low"), queue=low)
    high_id = connection.push(Records("high"), queue=high)

    first = connection.pop(5, [high, low])
    second = connection.pop(5, [high, low])

    assert first is not None
    assert second is not None
    assert (first.id, first.queue) == (high_id, high)
    assert (second.id, second.queue) == (low_id, low)
    connection.ack(first)
    connection.ack(second)
    assert connection.size(high) == 0
    assert connection.size(low) == 0


@pytest.mark.trait("stores_jobs")
def test_priority_follows_the_list_not_the_names(connection: Queue, queue_name: str) -> None:
    """Contract: The pop() priority/timeout contract (the same two queues, listed the other way round)."""
    a, b = f"{queue_name}-a", f"{queue_name}-b"
    a_id = connection.push(Records("a"), queue=a)
    b_id = connection.push(Records("b"), queue=b)

    delivered = _drain(connection, [b, a])

    assert [job.id for job in delivered] == [b_id, a_id]
    assert connection.size(a) == 0
    assert connection.size(b) == 0


@pytest.mark.trait("stores_jobs")
def test_queue_names_are_case_sensitive(connection: Queue, queue_name: str) -> None:
    """Contract: Queue names (letters of both cases are in the grammar, so "jobs" and "JOBS" are two queues)."""
    lower, upper = f"{queue_name}-jobs", f"{queue_name}-JOBS"
    upper_id = connection.push(Records("upper"), queue=upper)

    assert connection.size(lower) == 0
    assert connection.pop(0.01, [lower]) is None
    lower_id = connection.push(Records("lower"), queue=lower)
    delivered = connection.pop(5, [lower])

    assert delivered is not None
    assert (delivered.id, delivered.queue) == (lower_id, lower)
    connection.ack(delivered)
    assert connection.size(lower) == 0
    assert connection.size(upper) == 1
    other = connection.pop(5, [upper])
    assert other is not None
    assert (other.id, other.queue) == (upper_id, upper)
    connection.ack(other)


@pytest.mark.trait("stores_jobs")
def test_jobs_on_one_queue_come_out_in_push_order(connection: Queue, queue_name: str) -> None:
    """Contract: The pop() priority/timeout contract (within a queue, first pushed is first popped)."""
    pushed = [connection.push(Records(f"job-{n}"), queue=queue_name) for n in range(5)]

    delivered = _drain(connection, [queue_name])

    assert [job.id for job in delivered] == pushed
    assert [job.args["label"] for job in delivered] == [f"job-{n}" for n in range(5)]
    assert connection.size(queue_name) == 0


@pytest.mark.parametrize("timeout", [0, 0.0, 30])
def test_empty_queue_list_returns_none_at_once(
    connection: Queue, backend: Backend, queue_name: str, timeout: float
) -> None:
    """Contract: Queue names (an empty list is valid: pop() returns None immediately, even with timeout 0)."""
    connection.push(Noop(), queue=queue_name)
    size_before = connection.size(queue_name)
    start = time.monotonic()

    assert connection.pop(timeout, []) is None

    # Not a speed claim: timeout 0 means "no deadline", so a pop() that looked at all would never
    # return, and with 30 it would take 30 s. Either is far past this bound.
    assert time.monotonic() - start < 5
    assert connection.size(queue_name) == size_before == (1 if backend.stores_jobs else 0)


@pytest.mark.parametrize(
    "make_queues",
    [
        pytest.param(lambda q: [q, q], id="repeated"),
        pytest.param(lambda q: [q, f"{q}-other", q], id="repeated-apart"),
        pytest.param(lambda q: [q, "a b"], id="space"),
        pytest.param(lambda q: [q, ""], id="empty"),
        pytest.param(lambda q: [q, "x" * 81], id="81-chars"),
        pytest.param(lambda q: [q, f"{q}.tier"], id="dot"),
        pytest.param(lambda q: [q, f"{q}\n"], id="trailing-newline"),
        pytest.param(lambda q: [q, None], id="none"),
        pytest.param(lambda q: [q, 5], id="int"),
        pytest.param(lambda q: [q, b"name"], id="bytes"),
    ],
)
def test_invalid_queue_list_is_rejected_before_any_queue_is_touched(
    connection: Queue, backend: Backend, queue_name: str, make_queues: Any
) -> None:
    """Contract: Queue names (pop() validates the whole list before acting on any of it).

    The valid queue comes first and holds a job, so a pop() that swept before validating the rest
    of the list would reserve it.
    """
    job_id = connection.push(Records("untouched"), queue=queue_name)

    with pytest.raises(InvalidQueueArgumentError):
        connection.pop(1, make_queues(queue_name))

    if backend.stores_jobs:
        assert connection.size(queue_name) == 1
        delivered = connection.pop(5, [queue_name])
        assert delivered is not None
        assert (delivered.id, delivered.attempts) == (job_id, 1)
        connection.ack(delivered)
    assert connection.size(queue_name) == 0


@pytest.mark.parametrize(
    "make_queues", [pytest.param(lambda q: q, id="str"), pytest.param(lambda q: q.encode(), id="bytes")]
)
def test_single_name_instead_of_a_list_is_rejected(
    connection: Queue, backend: Backend, queue_name: str, make_queues: Any
) -> None:
    """Contract: Queue names (queues is a list; a bare string would be read as one-letter queue names)."""
    connection.push(Records("untouched"), queue=queue_name)

    with pytest.raises(InvalidQueueArgumentError):
        connection.pop(1, make_queues(queue_name))

    assert connection.size(queue_name) == (1 if backend.stores_jobs else 0)


@pytest.mark.parametrize(
    "timeout",
    [-1, -0.001, float("-inf"), float("nan"), "1", None],
    ids=["minus-1", "minus-epsilon", "minus-inf", "nan", "str", "none"],
)
def test_invalid_timeout_is_rejected_before_any_queue_is_touched(
    connection: Queue, backend: Backend, queue_name: str, timeout: Any
) -> None:
    """Contract: The pop() priority/timeout contract (a negative timeout is rejected)."""
    connection.push(Records("untouched"), queue=queue_name)

    with pytest.raises(InvalidQueueArgumentError):
        connection.pop(timeout, [queue_name])

    assert connection.size(queue_name) == (1 if backend.stores_jobs else 0)


@pytest.mark.trait("stores_jobs")
def test_positive_timeout_returns_none_no_earlier_than_its_deadline(connection: Queue, queue_name: str) -> None:
    """Contract: The pop() priority/timeout contract (a positive timeout looks for that long, then None).

    Backends that store jobs only: a job pushed by another process can arrive at any moment, so
    returning None before the deadline would miss it. (SyncQueue, where nothing can arrive,
    returns at once.)
    """
    timeout = 0.7
    start = time.monotonic()

    assert connection.pop(timeout, [queue_name]) is None

    elapsed = time.monotonic() - start
    # A correctness property of the deadline, not a speed claim: no upper bound is asserted.
    assert elapsed >= timeout, f"pop({timeout}) gave up after {elapsed:.3f}s"
    assert connection.size(queue_name) == 0


def _push_later(connection: Queue, queue: str, seconds: float, pushed: list[str]) -> threading.Timer:
    """Push a job from another thread after ``seconds``, appending its id to ``pushed``."""

    def push() -> None:
        try:
            pushed.append(connection.push(Records("late"), queue=queue))
        finally:
            db_connections.close_all()  # push() used this thread's own Django connection

    timer = threading.Timer(seconds, push)
    timer.start()
    return timer


@pytest.mark.trait("stores_jobs")
def test_zero_timeout_waits_until_a_job_arrives(connection: Queue, queue_name: str) -> None:
    """Contract: The pop() priority/timeout contract (timeout 0 waits with no deadline until a job is
    available; a job arriving during a wait is taken by the next sweep)."""
    pushed: list[str] = []
    pusher = _push_later(connection, queue_name, 0.3, pushed)
    try:
        delivered = connection.pop(0, [queue_name])
    finally:
        pusher.join()

    assert delivered is not None
    assert [delivered.id] == pushed
    connection.ack(delivered)
    assert connection.size(queue_name) == 0


@pytest.mark.trait("stores_jobs")
@pytest.mark.trait("pauses_between_sweeps")
def test_job_arriving_on_a_higher_priority_queue_during_a_wait_is_taken_first(
    connection: Queue, queue_name: str
) -> None:
    """Contract: The pop() priority/timeout contract (every probe reserves what it finds, in list order)."""
    high, low = f"{queue_name}-high", f"{queue_name}-low"
    low_id = connection.push(Records("low"), queue=low, delay=2.0)
    pushed: list[str] = []
    pusher = _push_later(connection, high, 0.3, pushed)
    try:
        # Both are due by the sweep that follows the first pause, and that sweep goes in list order.
        # (A backend whose wait the push wakes takes the high job before the low one is due.) The low job
        # is due 1.7 s after the high one is pushed: with 0.7 s, a push waiting on SQLite's lock behind the
        # popper's sweeps on a loaded machine came after it (the low job was taken first).
        first = connection.pop(10, [high, low])
    finally:
        pusher.join()
    assert first is not None
    # Settled before the next pop: that one may wait past the first's lease (1 s in the tests).
    connection.ack(first)
    second = connection.pop(10, [high, low])

    assert second is not None
    assert [first.id, second.id] == [*pushed, low_id]
    connection.ack(second)
    assert connection.size(high) == 0
    assert connection.size(low) == 0


@pytest.mark.trait("stores_jobs", "atomic_reserve")
def test_two_concurrent_poppers_never_receive_the_same_job(connection: Queue, queue_name: str) -> None:
    """Contract: At-least-once delivery (a pop() reserves what it finds in one atomic step).

    Both threads share ``connection``; a backend keeps whatever per-thread state it needs (the SQL
    queue opens one database connection per thread).
    """
    total = 40
    pushed = {connection.push(Records(f"job-{n}"), queue=queue_name) for n in range(total)}
    seen: dict[str, list[str]] = {"a": [], "b": []}
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def popper(name: str) -> None:
        try:
            start.wait()
            while (job := connection.pop(0.5, [queue_name])) is not None:
                seen[name].append(job.id)
                connection.ack(job)
        except BaseException as exc:  # re-raised in the test's own thread below
            errors.append(exc)

    threads = [threading.Thread(target=popper, args=(name,)) for name in seen]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert not any(thread.is_alive() for thread in threads)
    if errors:
        raise errors[0]
    together = seen["a"] + seen["b"]
    assert len(together) == len(set(together)), "a job was delivered to both poppers"
    assert set(together) == pushed
    assert connection.size(queue_name) == 0
