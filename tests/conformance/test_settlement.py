"""Conformance: ack(), release() and fail() (contract: "Delivery receipts and stale settlements", "release() across
backends")."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from kinetis_queue.contracts import JobSettlement, Queue, QueuedJob, RenewableQueue
from kinetis_queue.exceptions import InvalidQueueArgumentError, StaleJobHandleError
from tests.jobs import Noop, Records

SETTLEMENTS: dict[JobSettlement, Callable[[Queue, QueuedJob], None]] = {
    JobSettlement.ACK: lambda queue, job: queue.ack(job),
    JobSettlement.RELEASE: lambda queue, job: queue.release(job),
    JobSettlement.FAIL: lambda queue, job: queue.fail(job),
}


def _pop(connection: Queue, queue: str, timeout: float = 5) -> QueuedJob:
    job = connection.pop(timeout, [queue])
    assert job is not None, f"nothing delivered from {queue} within {timeout}s"
    return job


def _reclaimed(connection: Queue, queue: str) -> tuple[QueuedJob, QueuedJob]:
    """A job's first delivery, left to expire, and the second delivery that reclaimed it."""
    connection.push(Records("reclaimed"), queue=queue)
    first = _pop(connection, queue)
    second = _pop(connection, queue, timeout=10)  # the pop's own deadline is the wait for expiry
    assert second.id == first.id
    assert second.attempts == first.attempts + 1
    assert second.handle != first.handle
    return first, second


def _assert_never_redelivered(connection: Queue, queue: str) -> None:
    """Nothing comes back, even after a reservation the settlement failed to end would have expired.

    A bounded negative observation: a settled job is indistinguishable from a reserved one until the
    reservation would expire, so the look outlasts one visibility timeout: its sweeps at 1 s and
    1.5 s both come after the reservation taken before the look would have expired.
    """
    window = connection.visibility_timeout() + 0.5 if isinstance(connection, RenewableQueue) else 1.5
    assert connection.pop(window, [queue]) is None
    assert connection.size(queue) == 0


@pytest.mark.trait("stores_jobs")
@pytest.mark.parametrize("operation", [JobSettlement.ACK, JobSettlement.FAIL], ids=["ack", "fail"])
def test_ack_and_fail_remove_the_job(connection: Queue, queue_name: str, operation: JobSettlement) -> None:
    """Contract: release() across backends (ack() and fail() each remove the job with one operation)."""
    connection.push(Records("settled"), queue=queue_name)
    job = _pop(connection, queue_name)

    SETTLEMENTS[operation](connection, job)

    _assert_never_redelivered(connection, queue_name)


@pytest.mark.trait("stores_jobs")
def test_release_makes_the_job_poppable_again_as_a_new_delivery(connection: Queue, queue_name: str) -> None:
    """Contract: Delivery receipts and stale settlements (a released job comes back with a different handle)."""
    job_id = connection.push(Records("released", [1, 2]), queue=queue_name, max_attempts=5)
    first = _pop(connection, queue_name)

    connection.release(first)

    assert connection.size(queue_name) == 1
    second = _pop(connection, queue_name)
    assert second.id == first.id == job_id
    assert second.attempts == first.attempts + 1 == 2
    assert second.handle != first.handle
    assert second.pushed_at == first.pushed_at
    assert (second.job_class, second.args, second.max_attempts) == (first.job_class, first.args, 5)
    connection.ack(second)
    assert connection.size(queue_name) == 0


@pytest.mark.trait("stores_jobs")
@pytest.mark.trait("counts_delayed_release")
def test_release_delay_is_a_floor(connection: Queue, queue_name: str) -> None:
    """Contract: release() across backends (a job is held for at least the release delay)."""
    connection.push(Records("retried"), queue=queue_name)
    first = _pop(connection, queue_name)
    start = time.monotonic()

    connection.release(first, 1.0)

    assert connection.size(queue_name) == 1  # held back, but waiting work
    # The floor is the time at which the job came back, whenever the test looked: on a loaded machine, or on a
    # store whose size() takes a while, the second look may come after the delay, and then the job is rightly
    # there.
    early = connection.pop(0.2, [queue_name])
    second = early if early is not None else _pop(connection, queue_name)
    elapsed = time.monotonic() - start
    # A correctness property of the floor, not a speed claim: no upper bound is asserted.
    assert elapsed >= 1.0, f"redelivered {elapsed:.3f}s after a release with a 1s delay"
    assert (second.id, second.attempts) == (first.id, 2)
    connection.ack(second)
    assert connection.size(queue_name) == 0


@pytest.mark.trait("stores_jobs")
@pytest.mark.trait("counts_delayed_release")
def test_release_delay_may_be_a_timedelta(connection: Queue, queue_name: str) -> None:
    """Contract: release() across backends (the delay, here a timedelta, holds the job back)."""
    connection.push(Records("retried"), queue=queue_name)
    first = _pop(connection, queue_name)

    connection.release(first, timedelta(minutes=1))  # type: ignore[arg-type]

    # Held back, yet waiting work. A minute outlasts the test; one sweep is all the look needs.
    assert connection.size(queue_name) == 1
    assert connection.pop(0.01, [queue_name]) is None
    assert connection.size(queue_name) == 1


@pytest.mark.trait("stores_jobs")
@pytest.mark.parametrize(
    "delay",
    [-1, -0.001, float("nan"), float("inf"), True, "1", None, timedelta(seconds=-1)],
    ids=["minus-1", "minus-epsilon", "nan", "inf", "true", "str", "none", "negative-timedelta"],
)
def test_invalid_release_delay_is_rejected_and_the_job_stays_reserved(
    connection: Queue, queue_name: str, delay: Any
) -> None:
    """Contract: release() across backends (negative is rejected before any I/O)."""
    connection.push(Records("held"), queue=queue_name)
    job = _pop(connection, queue_name)

    with pytest.raises(InvalidQueueArgumentError):
        connection.release(job, delay)

    # Nothing was written: the reservation is intact, so the holder's own ack still settles it.
    connection.ack(job)
    assert connection.size(queue_name) == 0


@pytest.mark.trait("fenced")
@pytest.mark.parametrize("operation", list(SETTLEMENTS), ids=[op.value for op in SETTLEMENTS])
def test_stale_settlement_after_a_reclaim_is_rejected_and_writes_nothing(
    connection: Queue, queue_name: str, operation: JobSettlement
) -> None:
    """Contract: Delivery receipts and stale settlements (a finished delivery's settlement writes nothing)."""
    # Given a job whose first reservation expired and was reclaimed by a second pop()
    first, second = _reclaimed(connection, queue_name)

    # When the first worker settles late
    with pytest.raises(StaleJobHandleError) as raised:
        SETTLEMENTS[operation](connection, first)

    # Then nothing was written: no copy was made available, and the live delivery still settles
    assert raised.value.operation is operation
    assert connection.size(queue_name) == 0
    connection.ack(second)
    assert connection.size(queue_name) == 0


@pytest.mark.trait("fenced")
@pytest.mark.parametrize("operation", list(SETTLEMENTS), ids=[op.value for op in SETTLEMENTS])
def test_settlement_of_an_already_acked_delivery_is_stale(
    connection: Queue, queue_name: str, operation: JobSettlement
) -> None:
    """Contract: Delivery receipts and stale settlements (a repeated settlement names a finished delivery)."""
    connection.push(Noop(), queue=queue_name)
    job = _pop(connection, queue_name)
    connection.ack(job)

    with pytest.raises(StaleJobHandleError) as raised:
        SETTLEMENTS[operation](connection, job)

    assert raised.value.operation is operation
    assert connection.size(queue_name) == 0
    # A stale release would have put the job back; a fresh look finds nothing.
    assert connection.pop(0.2, [queue_name]) is None


@pytest.mark.trait("fenced")
def test_repeated_release_is_stale_and_queues_no_second_copy(connection: Queue, queue_name: str) -> None:
    """Contract: release() across backends (a stale or repeated release() is rejected, not a second copy)."""
    connection.push(Noop(), queue=queue_name)
    job = _pop(connection, queue_name)
    connection.release(job)

    with pytest.raises(StaleJobHandleError) as raised:
        connection.release(job)

    assert raised.value.operation is JobSettlement.RELEASE
    assert connection.size(queue_name) == 1
    again = _pop(connection, queue_name)
    assert (again.id, again.attempts) == (job.id, 2)
    connection.ack(again)
    assert connection.size(queue_name) == 0
    assert connection.pop(0.2, [queue_name]) is None


@pytest.mark.trait("fenced")
def test_released_delivery_cannot_be_acked_by_its_old_handle(connection: Queue, queue_name: str) -> None:
    """Contract: Delivery receipts and stale settlements (release ends the delivery its handle names)."""
    connection.push(Noop(), queue=queue_name)
    first = _pop(connection, queue_name)
    connection.release(first)
    second = _pop(connection, queue_name)

    with pytest.raises(StaleJobHandleError) as raised:
        connection.ack(first)

    assert raised.value.operation is JobSettlement.ACK
    connection.ack(second)
    assert connection.size(queue_name) == 0
