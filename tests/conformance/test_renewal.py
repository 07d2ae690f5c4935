"""Conformance: RenewableQueue (contract: "Reservation renewal")."""

from __future__ import annotations

import threading
import time

import pytest

from kinetis_queue.contracts import RenewableQueue
from tests.jobs import Records
from tests.support.fixtures import rebuilt
from tests.support.helpers import wait_until

#: tests/settings.py gives every renewable test connection a one-second visibility timeout.
CONFIGURED_VISIBILITY_TIMEOUT = 1
#: The lease of the renewal test's own queue (tests.support.fixtures.rebuilt), in seconds.
RENEWAL_TEST_LEASE = 3

pytestmark = [pytest.mark.trait("stores_jobs"), pytest.mark.requires.with_args(RenewableQueue)]


def test_visibility_timeout_is_the_configured_window(connection: RenewableQueue, queue_name: str) -> None:
    """Contract: Reservation renewal (visibilityTimeoutSeconds() is the reservation's window).

    An unrenewed reservation must not count as waiting again before that window has passed.
    """
    assert connection.visibility_timeout() == CONFIGURED_VISIBILITY_TIMEOUT
    assert type(connection.visibility_timeout()) is int

    connection.push(Records("held"), queue=queue_name)
    before_pop = time.monotonic()
    job = connection.pop(5, [queue_name])
    assert job is not None
    assert connection.size(queue_name) == 0

    wait_until(lambda: connection.size(queue_name) == 1, timeout=10)
    assert time.monotonic() - before_pop >= connection.visibility_timeout()
    connection.ack(job)  # nobody reclaimed it, so the holder can still settle
    assert connection.size(queue_name) == 0


def test_renewed_job_is_not_redelivered(
    connection: RenewableQueue, queue_name: str, request: pytest.FixtureRequest
) -> None:
    """Contract: Reservation renewal (each renew() moves the window forward; it settles nothing and
    consumes no attempt)."""
    # A lease of RENEWAL_TEST_LEASE seconds renewed every 0.3 s: the suite's one-second lease left a renewal
    # 0.7 s to land, and a loaded machine once took longer (sql-sqlite), so the job was rightly taken back.
    leased = rebuilt(request, visibility_timeout=RENEWAL_TEST_LEASE)
    assert isinstance(leased, RenewableQueue)
    leased.push(Records("long-running"), queue=queue_name)
    job = leased.pop(5, [queue_name])
    assert job is not None
    stop = threading.Event()
    errors: list[BaseException] = []

    def renew_every_300_ms() -> None:
        try:
            while not stop.wait(0.3):
                leased.renew(job)
        except BaseException as exc:  # re-raised in the test's own thread below
            errors.append(exc)

    renewer = threading.Thread(target=renew_every_300_ms)
    renewer.start()
    try:
        # A bounded negative observation, the one way to see a non-event: one and a half leases, so without the
        # renewals this pop would reclaim the job.
        redelivered = leased.pop(RENEWAL_TEST_LEASE * 1.5, [queue_name])
        still_hidden = leased.size(queue_name)
    finally:
        stop.set()
        renewer.join(10)

    if errors:
        raise errors[0]
    assert redelivered is None
    assert still_hidden == 0
    # The renewed reservation is still the holder's: its release works, and the attempt count shows
    # the renewals consumed none.
    leased.release(job)
    again = leased.pop(5, [queue_name])
    assert again is not None
    assert (again.id, again.attempts) == (job.id, 2)
    leased.ack(again)
    assert leased.size(queue_name) == 0


@pytest.mark.trait("fenced")
def test_renew_after_ack_does_not_raise_or_resurrect_the_job(connection: RenewableQueue, queue_name: str) -> None:
    """Contract: Reservation renewal (renew() claims nothing about the delivery; it never adds one back)."""
    connection.push(Records("done"), queue=queue_name)
    job = connection.pop(5, [queue_name])
    assert job is not None
    connection.ack(job)

    connection.renew(job)
    connection.renew(job)

    assert connection.size(queue_name) == 0
    # A bounded negative observation: a renewal that wrote the job back as reserved would show up
    # once that reservation expired, so the look outlasts one visibility timeout (its sweeps at 1 s
    # and 1.5 s both come after the last renewal's window).
    assert connection.pop(connection.visibility_timeout() + 0.5, [queue_name]) is None
    assert connection.size(queue_name) == 0


@pytest.mark.trait("fenced")
def test_renew_of_a_reclaimed_delivery_does_not_take_the_reservation_back(
    connection: RenewableQueue, queue_name: str
) -> None:
    """Contract: Reservation renewal (the fence: a renewal names one reservation, and never another)."""
    connection.push(Records("reclaimed"), queue=queue_name)
    first = connection.pop(5, [queue_name])
    assert first is not None
    second = connection.pop(10, [queue_name])  # the pop's own deadline is the wait for expiry
    assert second is not None
    assert (second.id, second.attempts) == (first.id, 2)

    connection.renew(first)

    # The live delivery is untouched: the renewal did not write the old receipt back, so the
    # current holder's settlement still matches.
    connection.ack(second)
    assert connection.size(queue_name) == 0
