"""Conformance: an expired reservation is redelivered (contract: "Reservation and recovery")."""

from __future__ import annotations

import pytest

from kinetis_queue.contracts import Queue, RenewableQueue
from tests.jobs import Records
from tests.support.backends import Backend
from tests.support.helpers import wait_until


@pytest.fixture
def recovers_by_timeout(backend: Backend) -> None:
    if backend.recovers_by != "timeout":
        pytest.skip(f"{backend.id}: spec says recovery is by {backend.recovers_by}, not by a timeout")


@pytest.mark.trait("stores_jobs")
@pytest.mark.usefixtures("recovers_by_timeout")
def test_expired_reservation_is_redelivered_with_the_next_attempt(connection: Queue, queue_name: str) -> None:
    """Contract: Reservation and recovery (reclaimed by the next pop(): same id and pushedAt, attempts + 1,
    a different handle)."""
    job_id = connection.push(Records("crashed", [7]), queue=queue_name, max_attempts=3)
    first = connection.pop(5, [queue_name])
    assert first is not None

    # The worker holding ``first`` is gone and never settles it; the next pop's deadline is the wait.
    second = connection.pop(10, [queue_name])

    assert second is not None
    assert second.id == first.id == job_id
    assert second.pushed_at == first.pushed_at
    assert second.attempts == first.attempts + 1 == 2
    assert second.handle != first.handle
    assert (second.queue, second.job_class, second.args, second.max_attempts) == (
        first.queue,
        first.job_class,
        first.args,
        first.max_attempts,
    )
    connection.ack(second)
    assert connection.size(queue_name) == 0


@pytest.mark.trait("stores_jobs")
@pytest.mark.trait("pauses_between_sweeps")
@pytest.mark.usefixtures("recovers_by_timeout")
def test_reserved_job_is_not_delivered_again_before_its_reservation_expires(connection: Queue, queue_name: str) -> None:
    """Contract: Reservation and recovery (a live reservation hides the job from other pops)."""
    connection.push(Records("held"), queue=queue_name)
    held = connection.pop(5, [queue_name])
    assert held is not None

    # A bounded negative observation, kept well inside the 1 s visibility timeout: a second pop
    # finding nothing is the only evidence that the reservation hides the job.
    assert connection.pop(0.3, [queue_name]) is None

    assert connection.size(queue_name) == 0
    connection.ack(held)
    assert connection.size(queue_name) == 0


@pytest.mark.trait("stores_jobs")
@pytest.mark.requires.with_args(RenewableQueue)
@pytest.mark.usefixtures("recovers_by_timeout")
def test_reclaimed_job_gets_no_delay(connection: RenewableQueue, queue_name: str) -> None:
    """Contract: release() across backends (a crashed delivery reclaimed after expiry gets no delay:
    the next worker takes it immediately)."""
    connection.push(Records("crashed"), queue=queue_name)
    first = connection.pop(5, [queue_name])
    assert first is not None

    # Once size() counts the expired reservation as waiting again, the very first sweep of a pop
    # must reserve it: a recovery that added a retry delay would leave that sweep empty.
    wait_until(lambda: connection.size(queue_name) == 1, timeout=10)
    second = connection.pop(0.01, [queue_name])

    assert second is not None
    assert (second.id, second.attempts) == (first.id, 2)
    connection.ack(second)
    assert connection.size(queue_name) == 0
