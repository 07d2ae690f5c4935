"""The contract's default batch primitives (issue 14), as a custom backend that overrides none of them
gets them: tests/support/custom_backends.py's SqlWithoutBatch, the SQL backend on SQLite with its batch
primitives set back to the defaults. Each shipped backend overrides them (tests/conformance/test_batch.py)."""

from __future__ import annotations

import pytest
from django.db import connections as db_connections

from kinetis_queue.contracts import Queue
from kinetis_queue.exceptions import MalformedJobSettledError, StaleJobHandleError
from tests.jobs import Records
from tests.support.custom_backends import SqlWithoutBatch


def stored(queue_name: str) -> list[str]:
    """The ids of the jobs stored on ``queue_name``, waiting or reserved."""
    with db_connections["default"].cursor() as cursor:
        cursor.execute("SELECT job_id FROM kinetis_queue_jobs WHERE queue = %s ORDER BY id", [queue_name])
        return [row[0] for row in cursor.fetchall()]


@pytest.fixture
def queue() -> SqlWithoutBatch:
    return SqlWithoutBatch(database="default", visibility_timeout=1, connection="sqlite")


def test_the_custom_backend_really_uses_the_defaults(queue: SqlWithoutBatch) -> None:
    for primitive in ("_push_many", "_sweep_many", "_ack_many", "_unreserve", "_wait"):
        assert getattr(type(queue), primitive) is getattr(Queue, primitive), primitive


def test_pop_many_of_no_queue_reserves_nothing_at_once(queue: SqlWithoutBatch, queue_name: str) -> None:
    """An empty priority list has nothing to sweep: empty at once, whatever the timeout (0 would
    otherwise wait forever)."""
    queue.push(Records("waiting"), queue=queue_name)
    reserved = queue.pop_many(0, [], 5)
    assert reserved.jobs == [] and reserved.malformed == []
    assert queue.size(queue_name) == 1


def test_push_many_and_pop_many_deliver_one_job_per_sweep_in_order(queue: SqlWithoutBatch, queue_name: str) -> None:
    ids = queue.push_many([Records("a"), Records("b")], queue=queue_name)
    first = queue.pop_many(1, [queue_name], 5)
    assert [job.id for job in first.jobs] == ids[:1] and first.malformed == []
    second = queue.pop_many(1, [queue_name], 5)
    assert [job.id for job in second.jobs] == ids[1:]
    assert queue.ack_many(first.jobs + second.jobs) == [None, None]
    assert queue.size(queue_name) == 0


def test_pop_many_reports_a_malformed_message_instead_of_raising(queue: SqlWithoutBatch, queue_name: str) -> None:
    """Contract: a malformed message met by pop_many() is removed and reported in ``malformed``."""
    corrupted = queue.push(Records("corrupted"), queue=queue_name)
    healthy = queue.push(Records("healthy"), queue=queue_name)
    with db_connections["default"].cursor() as cursor:
        cursor.execute("UPDATE kinetis_queue_jobs SET args = %s WHERE job_id = %s", ["not json", corrupted])
        assert cursor.rowcount == 1

    reserved = queue.pop_many(1, [queue_name], 5)

    assert reserved.jobs == []
    (malformed,) = reserved.malformed
    assert isinstance(malformed, MalformedJobSettledError)
    assert stored(queue_name) == [healthy]  # the corrupted row is gone; the healthy job still waits
    following = queue.pop_many(1, [queue_name], 5)
    assert [job.id for job in following.jobs] == [healthy]
    assert queue.ack_many(following.jobs) == [None]


def test_ack_many_reports_a_stale_delivery_and_acks_the_others(queue: SqlWithoutBatch, queue_name: str) -> None:
    """Contract: one result per job, in order; a refusal is reported, never raised, and the jobs
    after it are still acked."""
    ids = queue.push_many([Records("a"), Records("b"), Records("c")], queue=queue_name)
    held = [queue.pop(1, [queue_name]) for _ in ids]
    assert [job.id for job in held if job is not None] == ids
    with db_connections["default"].cursor() as cursor:  # a reclaim by another worker
        cursor.execute("UPDATE kinetis_queue_jobs SET reserved_token = %s WHERE job_id = %s", ["f" * 32, ids[1]])

    results = queue.ack_many([job for job in held if job is not None])

    assert results[0] is None and results[2] is None
    assert isinstance(results[1], StaleJobHandleError)
    assert stored(queue_name) == [ids[1]]  # only the stolen delivery's job is left
    assert queue.ack_many([]) == []


def test_unreserve_by_default_releases_and_so_charges_the_attempt(queue: SqlWithoutBatch, queue_name: str) -> None:
    """The documented cost of the default: the job is poppable again at once, but as a release, so its
    next delivery counts one more attempt (every shipped backend overrides _unreserve to avoid that)."""
    job_id = queue.push(Records("a"), queue=queue_name)
    first = queue.pop(1, [queue_name])
    assert first is not None and first.attempts == 1
    queue.unreserve(first)
    again = queue.pop(1, [queue_name])
    assert again is not None and (again.id, again.attempts) == (job_id, 2)
    queue.ack(again)
    with pytest.raises(StaleJobHandleError):
        queue.unreserve(first)  # fenced as the release it is
