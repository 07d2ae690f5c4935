"""Conformance: job priority within a queue (issue 19, docs/priority.md).

On a store that orders by priority (SQL, Redis) a higher priority is delivered first and equal
priorities in push order, and a job keeps its priority through a delay, a release, an unreserve and
a reclaimed reservation. A store that cannot (SQS, RabbitMQ) refuses a priority other than 0 before
any I/O; every backend refuses one outside -100..100.
"""

from __future__ import annotations

from typing import Any

import pytest

from kinetis_queue.contracts import Queue, QueuedJob
from kinetis_queue.exceptions import InvalidQueueArgumentError
from tests.jobs import Records, UrgentRecords
from tests.support.helpers import wait_until


def _pop(connection: Queue, queue: str, timeout: float = 5) -> QueuedJob:
    job = connection.pop(timeout, [queue])
    assert job is not None, f"nothing delivered from {queue} within {timeout}s"
    return job


def _drain(connection: Queue, queue: str) -> list[str]:
    """Pop and ack everything waiting on ``queue``; the labels in delivery order."""
    labels = []
    while (job := connection.pop(0.2, [queue])) is not None:
        labels.append(job.args["label"])
        connection.ack(job)
    return labels


@pytest.mark.trait("orders_by_priority")
def test_higher_priority_is_delivered_first_and_equal_ones_in_push_order(connection: Queue, queue_name: str) -> None:
    assert connection.supports_priority
    for label, priority in [("a0", 0), ("b5", 5), ("c-3", -3), ("d5", 5), ("e0", 0), ("f100", 100), ("g-100", -100)]:
        connection.push(Records(label), queue=queue_name, priority=priority)
    connection.push(Records("h-3"), queue=queue_name, priority=-3)

    assert connection.size(queue_name) == 8
    assert _drain(connection, queue_name) == ["f100", "b5", "d5", "a0", "e0", "c-3", "h-3", "g-100"]
    assert connection.size(queue_name) == 0


@pytest.mark.trait("orders_by_priority")
def test_a_delivery_reports_its_priority_and_the_job_class_sets_the_default(connection: Queue, queue_name: str) -> None:
    connection.push(Records("plain"), queue=queue_name)
    connection.push(UrgentRecords("class"), queue=queue_name)
    connection.push(UrgentRecords("overridden"), queue=queue_name, priority=-1)

    first, second, third = (_pop(connection, queue_name) for _ in range(3))

    assert [(job.args["label"], job.priority) for job in (first, second, third)] == [
        ("class", 10),
        ("plain", 0),
        ("overridden", -1),
    ]
    assert "kinetis_queue.priority" not in second.metadata  # no priority: the envelope is as before
    for job in (first, second, third):
        connection.ack(job)


@pytest.mark.trait("orders_by_priority")
def test_pop_many_and_push_many_keep_the_order(connection: Queue, queue_name: str) -> None:
    connection.push_many([Records("low1"), Records("low2")], queue=queue_name, priority=-5)
    connection.push_many([Records("mid1"), UrgentRecords("urgent"), Records("mid2")], queue=queue_name)
    connection.push_many([Records("high1"), Records("high2")], queue=queue_name, priority=7)

    reserved = connection.pop_many(5, [queue_name], 10)

    assert [job.args["label"] for job in reserved.jobs] == ["urgent", "high1", "high2", "mid1", "mid2", "low1", "low2"]
    assert connection.ack_many(reserved.jobs) == [None] * 7
    assert connection.size(queue_name) == 0


@pytest.mark.trait("orders_by_priority")
def test_queue_list_order_comes_before_priority(connection: Queue, queue_name: str) -> None:
    """Contract: "The pop() priority/timeout contract": the list order of queues is not changed by priority."""
    other = queue_name + "-lo"
    connection.push(Records("other-high"), queue=other, priority=100)
    connection.push(Records("first-low"), queue=queue_name, priority=-100)

    first = _pop(connection, queue_name)
    connection.ack(first)
    second = connection.pop(5, [queue_name, other])

    assert first.args["label"] == "first-low"
    assert second is not None and second.args["label"] == "other-high"
    connection.ack(second)


@pytest.mark.trait("orders_by_priority")
def test_a_delayed_job_keeps_its_priority_when_it_becomes_due(connection: Queue, queue_name: str) -> None:
    connection.push(Records("plain1"), queue=queue_name)
    connection.push(Records("delayed-high"), queue=queue_name, priority=9, delay=0.3)
    connection.push(Records("plain2"), queue=queue_name)
    wait_until(lambda: connection.stats(queue_name).ready == 3, timeout=5)

    assert _drain(connection, queue_name) == ["delayed-high", "plain1", "plain2"]


@pytest.mark.trait("orders_by_priority")
@pytest.mark.parametrize("delay", [0, 0.3], ids=["at-once", "delayed"])
def test_a_released_job_keeps_its_priority(connection: Queue, queue_name: str, delay: float) -> None:
    connection.push(Records("high"), queue=queue_name, priority=3)
    connection.push(Records("plain"), queue=queue_name)
    high = _pop(connection, queue_name)
    assert high.args["label"] == "high"

    connection.release(high, delay)
    if delay:
        wait_until(lambda: connection.stats(queue_name).ready == 2, timeout=5)
    again = _pop(connection, queue_name)

    assert (again.args["label"], again.priority, again.attempts) == ("high", 3, 2)
    connection.ack(again)
    assert _drain(connection, queue_name) == ["plain"]


@pytest.mark.trait("orders_by_priority")
def test_an_unreserved_job_keeps_its_priority_and_its_attempt(connection: Queue, queue_name: str) -> None:
    connection.push(Records("low"), queue=queue_name, priority=-2)
    connection.push(Records("plain"), queue=queue_name)
    plain = _pop(connection, queue_name)
    low = _pop(connection, queue_name)
    connection.push(Records("later"), queue=queue_name, priority=-2)

    connection.unreserve(low)
    connection.unreserve(plain)

    assert [(job.args["label"], job.attempts) for job in (_pop(connection, queue_name) for _ in range(3))] == [
        ("plain", 1),
        ("low", 1),
        ("later", 1),
    ]


@pytest.mark.trait("orders_by_priority", "recovers_by_timeout")
def test_a_reclaimed_reservation_keeps_its_priority(connection: Queue, queue_name: str) -> None:
    connection.push(Records("high"), queue=queue_name, priority=4)
    lost = _pop(connection, queue_name)
    wait_until(lambda: connection.size(queue_name) == 1, timeout=10)  # the reservation expired
    connection.push(Records("plain"), queue=queue_name)

    again = _pop(connection, queue_name)

    assert (again.id, again.priority, again.attempts) == (lost.id, 4, 2)
    connection.ack(again)
    assert _drain(connection, queue_name) == ["plain"]


@pytest.mark.trait("refuses_priority")
@pytest.mark.parametrize(
    "push",
    [
        lambda queue, name: queue.push(Records("x"), queue=name, priority=5),
        lambda queue, name: queue.push(UrgentRecords("x"), queue=name),
        lambda queue, name: queue.push_many([Records("x")], queue=name, priority=-1),
    ],
    ids=["push", "job-class", "push_many"],
)
def test_a_store_that_cannot_order_refuses_a_priority(connection: Queue, queue_name: str, push: Any) -> None:
    assert not connection.supports_priority
    with pytest.raises(InvalidQueueArgumentError, match=f"the {connection.backend_name} backend cannot order jobs"):
        push(connection, queue_name)

    assert connection.size(queue_name) == 0
    connection.push(UrgentRecords("explicit-zero"), queue=queue_name, priority=0)
    assert _drain(connection, queue_name) == ["explicit-zero"]


@pytest.mark.parametrize("priority", [101, -101, 1.5, True, "1"])
def test_a_priority_outside_the_range_is_refused_before_any_io(
    connection: Queue, queue_name: str, priority: Any
) -> None:
    with pytest.raises(InvalidQueueArgumentError, match="priority must be an int from -100 to 100"):
        connection.push(Records("x"), queue=queue_name, priority=priority)
    assert connection.size(queue_name) == 0


@pytest.mark.parametrize("stored", [{"kinetis_queue.priority": 7}, {}, {"kinetis_queue.priority": "7"}])
def test_retrying_a_failed_job_keeps_its_priority(queue_name: str, stored: dict[str, Any]) -> None:
    """queue_retry pushes the job again at the priority it had (0 when it had none, or a tampered one)."""
    from kinetis_queue import queues
    from kinetis_queue.failed import retry
    from kinetis_queue.models import FailedJob
    from kinetis_queue.payload.envelope import dumps

    record = FailedJob.objects.create(
        connection="sqlite",
        queue=queue_name,
        job_id="0" * 32,
        job_class="tests.jobs.Records",
        args=dumps({"label": "again", "items": None, "color": None, "when": None}),
        metadata=dumps(stored),
        attempts=3,
        exception_class="RuntimeError",
    )

    outcome = retry(record.pk)

    assert outcome.error is None
    job = _pop(queues["sqlite"], queue_name)
    assert (job.args["label"], job.priority) == ("again", 7 if stored.get("kinetis_queue.priority") == 7 else 0)
    queues["sqlite"].ack(job)
