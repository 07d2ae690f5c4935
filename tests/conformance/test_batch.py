"""Conformance: the batch operations and unreserve() on every backend (issue 14: push_many, pop_many,
ack_many, unreserve; DESIGN.md §9 fixes ``push_many``)."""

from __future__ import annotations

from typing import Any

import pytest

from kinetis_queue.contracts import JobSettlement, Queue
from kinetis_queue.exceptions import InvalidQueueArgumentError, StaleJobHandleError, UnserializableJobError
from tests import jobs
from tests.jobs import Records
from tests.support.backends import Backend

N = 12


def _spy(connection: Queue, monkeypatch: pytest.MonkeyPatch, name: str) -> list[Any]:
    calls: list[Any] = []
    real = getattr(connection, name)

    def spy(*args: Any) -> Any:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(connection, name, spy)
    return calls


def _needs_own_unreserve(connection: Queue) -> None:
    """The contract's fallback unreserve() is a release, which charges the attempt: a backend must override it."""
    if type(connection)._unreserve is Queue._unreserve:
        pytest.xfail(f"{type(connection).__name__} does not implement _unreserve() yet")


def _drain(connection: Queue, queue: str, expected: int) -> list[Any]:
    """Pop (one batch at a time) until ``expected`` deliveries are held."""
    held: list[Any] = []
    while len(held) < expected:
        reserved = connection.pop_many(5, [queue], expected - len(held))
        assert reserved.malformed == []
        assert reserved.jobs, f"only {len(held)} of {expected} deliveries came back"
        held += reserved.jobs
    return held


def test_push_many_returns_the_ids_in_order_and_stores_every_job(
    connection: Queue, backend: Backend, queue_name: str
) -> None:
    """push_many(): one id per job, in order; each job delivered once with its own arguments."""
    ids = connection.push_many([Records(f"job-{i}") for i in range(N)], queue=queue_name)

    assert len(ids) == N and len(set(ids)) == N
    if not backend.stores_jobs:
        assert [call[1] for call in jobs.CALLS] == [f"job-{i}" for i in range(N)]
        return
    held = _drain(connection, queue_name, N)
    assert sorted(job.id for job in held) == sorted(ids)
    assert {job.id: job.args["label"] for job in held} == {job_id: f"job-{i}" for i, job_id in enumerate(ids)}
    assert all(job.attempts == 1 for job in held)
    assert connection.ack_many(held) == [None] * N
    assert connection.size(queue_name) == 0


def test_push_many_of_nothing_stores_nothing(connection: Queue, queue_name: str) -> None:
    assert connection.push_many([], queue=queue_name) == []
    assert connection.size(queue_name) == 0


@pytest.mark.parametrize("bad_index", [0, 5])
def test_push_many_with_one_bad_job_stores_none_and_names_its_index(
    connection: Queue, queue_name: str, bad_index: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every job is checked before any I/O: one bad job, nothing written, the error names its index."""
    batch: list[Any] = [Records(f"job-{i}") for i in range(8)]
    batch[bad_index] = Records("bad", items=[object()])  # type: ignore[list-item]
    reached = _spy(connection, monkeypatch, "_push_many")

    with pytest.raises(UnserializableJobError, match=rf"^jobs\[{bad_index}\]: "):
        connection.push_many(batch, queue=queue_name)

    assert reached == []
    assert connection.size(queue_name) == 0
    assert jobs.CALLS == []


@pytest.mark.parametrize("jobs_value", ["Records", b"x", None, 5, {"a"}], ids=["str", "bytes", "none", "int", "set"])
def test_push_many_takes_a_sequence(connection: Queue, queue_name: str, jobs_value: Any) -> None:
    with pytest.raises(InvalidQueueArgumentError, match="sequence of jobs"):
        connection.push_many(jobs_value, queue=queue_name)


def test_push_many_checks_the_shared_arguments_before_any_io(
    connection: Queue, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reached = _spy(connection, monkeypatch, "_push_many")
    with pytest.raises(InvalidQueueArgumentError, match=r"^jobs\[0\]: "):
        connection.push_many([Records("a")], delay=-1, queue=queue_name)
    with pytest.raises(InvalidQueueArgumentError, match=r"^jobs\[0\]: "):
        connection.push_many([Records("a")], queue="bad name")
    assert reached == []


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "2"], ids=["zero", "negative", "float", "bool", "str"])
def test_pop_many_rejects_a_bad_limit(connection: Queue, queue_name: str, limit: Any) -> None:
    with pytest.raises(InvalidQueueArgumentError, match="limit"):
        connection.pop_many(0.1, [queue_name], limit)


def test_pop_many_never_returns_more_than_its_limit_and_follows_priority(
    connection: Queue, backend: Backend, queue_name: str
) -> None:
    """pop_many(): at most ``limit``; a higher-priority queue's jobs come first, as successive pops."""
    if not backend.stores_jobs:
        pytest.skip("sync stores nothing to pop")
    low, high = queue_name, queue_name + "-hi"
    connection.push_many([Records(f"low-{i}") for i in range(3)], queue=low)
    connection.push_many([Records(f"high-{i}") for i in range(3)], queue=high)

    held: list[Any] = []
    while len(held) < 6:
        reserved = connection.pop_many(5, [high, low], 2)
        assert 1 <= len(reserved.jobs) <= 2
        held += reserved.jobs
    assert [job.queue for job in held[:3]] == [high] * 3
    assert connection.ack_many(held) == [None] * 6


def test_pop_many_on_empty_queues_returns_nothing_after_its_timeout(connection: Queue, queue_name: str) -> None:
    reserved = connection.pop_many(0.2, [queue_name], 5)
    assert not reserved
    assert reserved.jobs == [] and reserved.malformed == []


def test_ack_many_reports_a_stale_delivery_in_place_and_acks_the_rest(
    connection: Queue, backend: Backend, queue_name: str
) -> None:
    """ack_many(): each ack fenced on its own; a stale one is reported in its place, never raised."""
    if not backend.stores_jobs or not backend.fenced:
        pytest.skip("only fenced backends refuse a stale ack")
    connection.push_many([Records(f"job-{i}") for i in range(3)], queue=queue_name)
    held = _drain(connection, queue_name, 3)
    connection.ack(held[1])

    results = connection.ack_many(held)

    assert results[0] is None and results[2] is None
    assert isinstance(results[1], StaleJobHandleError)
    assert results[1].operation is JobSettlement.ACK
    assert connection.size(queue_name) == 0


def test_unreserve_gives_a_delivery_back_without_charging_an_attempt(
    connection: Queue, backend: Backend, queue_name: str
) -> None:
    """unreserve(): poppable again at once, with the same attempt number."""
    if not backend.stores_jobs:
        pytest.skip("sync stores nothing to give back")
    _needs_own_unreserve(connection)
    connection.push(Records("given-back"), queue=queue_name)
    first = _drain(connection, queue_name, 1)[0]

    connection.unreserve(first)

    again = _drain(connection, queue_name, 1)[0]
    assert again.id == first.id
    assert again.attempts == first.attempts == 1
    connection.ack(again)
    assert connection.size(queue_name) == 0


def test_unreserve_of_a_settled_delivery_is_refused_as_stale(
    connection: Queue, backend: Backend, queue_name: str
) -> None:
    if not backend.stores_jobs or not backend.fenced:
        pytest.skip("only fenced backends refuse a stale settlement")
    _needs_own_unreserve(connection)
    connection.push(Records("settled"), queue=queue_name)
    first = _drain(connection, queue_name, 1)[0]
    connection.ack(first)

    with pytest.raises(StaleJobHandleError) as refused:
        connection.unreserve(first)

    assert refused.value.operation is JobSettlement.UNRESERVE
    assert connection.size(queue_name) == 0
