"""Conformance: size() and clear() (contract: "Waiting counts and clearing", "Queue names")."""

from __future__ import annotations

from typing import Any

import pytest

from kinetis_queue.contracts import ClearableQueue, Queue, RenewableQueue
from kinetis_queue.exceptions import InvalidQueueArgumentError
from tests.jobs import Records
from tests.support.backends import Backend
from tests.support.helpers import wait_until

#: Bad names built from the test's own queue name, so a backend that trimmed, truncated or matched
#: them loosely (a PAD SPACE collation, a regex ``$`` before a newline) would touch that queue.
BAD_NAMES = [
    pytest.param(lambda q: "", id="empty"),
    pytest.param(lambda q: q + "x" * (81 - len(q)), id="81-chars"),
    pytest.param(lambda q: f"{q} ", id="trailing-space"),
    pytest.param(lambda q: f" {q}", id="leading-space"),
    pytest.param(lambda q: f"{q}\n", id="trailing-newline"),
    pytest.param(lambda q: f"{q} b", id="space"),
    pytest.param(lambda q: f"{q}.b", id="dot"),
    pytest.param(lambda q: f"{q}%", id="percent"),
    pytest.param(lambda q: None, id="none"),
    pytest.param(lambda q: 5, id="int"),
    pytest.param(lambda q: q.encode(), id="bytes"),
    pytest.param(lambda q: [q], id="list"),
]


def test_size_of_an_untouched_queue_is_0(connection: Queue, queue_name: str) -> None:
    """Contract: Waiting counts and clearing (size() reports waiting work; there is none)."""
    assert connection.size(queue_name) == 0
    assert connection.pop(0.01, [queue_name]) is None
    assert connection.size(queue_name) == 0


@pytest.mark.trait("stores_jobs")
def test_size_counts_waiting_and_delayed_jobs_but_not_reserved_ones(connection: Queue, queue_name: str) -> None:
    """Contract: Waiting counts and clearing (jobs inside their delay count; jobs a worker holds do not)."""
    first = connection.push(Records("first"), queue=queue_name)
    connection.push(Records("delayed"), delay=60, queue=queue_name)
    connection.push(Records("second"), queue=queue_name)
    assert connection.size(queue_name) == 3

    held = connection.pop(5, [queue_name])

    assert held is not None
    assert held.id == first
    assert connection.size(queue_name) == 2
    connection.ack(held)
    assert connection.size(queue_name) == 2
    assert connection.size(f"{queue_name}-other") == 0


@pytest.mark.trait("stores_jobs")
@pytest.mark.requires.with_args(RenewableQueue)
def test_expired_reservation_counts_as_waiting_again(connection: RenewableQueue, queue_name: str) -> None:
    """Contract: Waiting counts and clearing (a reservation past its timeout counts as waiting)."""
    connection.push(Records("abandoned"), queue=queue_name)
    held = connection.pop(5, [queue_name])
    assert held is not None
    assert connection.size(queue_name) == 0

    wait_until(lambda: connection.size(queue_name) == 1, timeout=10)

    again = connection.pop(5, [queue_name])
    assert again is not None
    assert (again.id, again.attempts) == (held.id, 2)
    assert connection.size(queue_name) == 0
    connection.ack(again)
    assert connection.size(queue_name) == 0


@pytest.mark.requires.with_args(ClearableQueue)
def test_clear_of_an_empty_queue_returns_0(connection: ClearableQueue, queue_name: str) -> None:
    """Contract: Waiting counts and clearing (clear() returns how many that call removed)."""
    connection.push(Records("elsewhere"), queue=f"{queue_name}-other")

    assert connection.clear(queue_name) == 0

    assert connection.size(queue_name) == 0


@pytest.mark.trait("stores_jobs")
@pytest.mark.requires.with_args(ClearableQueue)
def test_clear_removes_waiting_and_delayed_jobs_and_returns_the_count(
    connection: ClearableQueue, queue_name: str
) -> None:
    """Contract: Waiting counts and clearing (clear() discards every unreserved job, delayed ones included)."""
    other = f"{queue_name}-other"
    connection.push(Records("a"), queue=queue_name)
    connection.push(Records("b"), queue=queue_name)
    connection.push(Records("later"), delay=60, queue=queue_name)
    connection.push(Records("other queue"), queue=other)

    assert connection.clear(queue_name) == 3

    assert connection.size(queue_name) == 0
    assert connection.pop(0.01, [queue_name]) is None
    assert connection.clear(queue_name) == 0
    assert connection.size(other) == 1  # another queue is untouched


@pytest.mark.trait("stores_jobs")
@pytest.mark.requires.with_args(ClearableQueue)
def test_clear_leaves_a_reservation_alone_even_past_its_timeout(connection: ClearableQueue, queue_name: str) -> None:
    """Contract: Waiting counts and clearing (clear() never removes a reservation, including an expired one)."""
    held_id = connection.push(Records("held"), queue=queue_name)
    held = connection.pop(5, [queue_name])
    assert held is not None
    connection.push(Records("waiting"), queue=queue_name)

    assert connection.clear(queue_name) == 1
    assert connection.size(queue_name) == 0

    if isinstance(connection, RenewableQueue):
        # Past its timeout the reservation counts as waiting, yet clear() still may not take it.
        wait_until(lambda: connection.size(queue_name) == 1, timeout=10)
        assert connection.clear(queue_name) == 0
        assert connection.size(queue_name) == 1

    # Nobody reclaimed it, so the holder's settlement still lands on it.
    assert held.id == held_id
    connection.ack(held)
    assert connection.size(queue_name) == 0
    assert connection.clear(queue_name) == 0


@pytest.mark.parametrize("make_name", BAD_NAMES)
def test_size_rejects_an_invalid_queue_name(
    connection: Queue, backend: Backend, queue_name: str, make_name: Any
) -> None:
    """Contract: Queue names (size() validates the name before any backend I/O)."""
    connection.push(Records("bystander"), queue=queue_name)

    with pytest.raises(InvalidQueueArgumentError):
        connection.size(make_name(queue_name))

    assert connection.size(queue_name) == (1 if backend.stores_jobs else 0)


@pytest.mark.requires.with_args(ClearableQueue)
@pytest.mark.parametrize("make_name", BAD_NAMES)
def test_clear_rejects_an_invalid_queue_name_and_clears_nothing(
    connection: ClearableQueue, backend: Backend, queue_name: str, make_name: Any
) -> None:
    """Contract: Queue names (clear() validates the name before any backend I/O)."""
    connection.push(Records("bystander"), queue=queue_name)

    with pytest.raises(InvalidQueueArgumentError):
        connection.clear(make_name(queue_name))

    assert connection.size(queue_name) == (1 if backend.stores_jobs else 0)
