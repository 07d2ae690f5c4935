"""RabbitMQ quorum queues (QUEUE_TYPE "quorum", issue 20) beyond the conformance suite's rabbitmq-quorum row.

What is checked against the machine's broker (3.10): the work queue and its ladder tiers are quorum
queues, a queue of the other type is refused with an error naming QUEUE_TYPE, a broker redelivery is
republished behind the waiting jobs as a new message (its x-delivery-count back at 0), and no delivery
limit of the broker's cuts a job short of max_attempts. docs/backends/rabbitmq.md, "Quorum queues".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import amqp
import pytest

from kinetis_queue.backends.rabbitmq import RabbitMqQueue, ladder
from kinetis_queue.exceptions import QueueConfigurationError
from tests.jobs import Records
from tests.settings import RABBITMQ_URL
from tests.support.rabbitmq_broker import queue_exists

BROKER = "127.0.0.1:5672"


@pytest.fixture
def make_queue(queue_name: str) -> Iterator[Callable[..., RabbitMqQueue]]:
    """Build RabbitMqQueues on the broker; every queue they declared is deleted afterwards."""
    built: list[RabbitMqQueue] = []

    def make(**options: Any) -> RabbitMqQueue:
        queue = RabbitMqQueue(url=RABBITMQ_URL, **options)
        built.append(queue)
        return queue

    yield make
    names = {queue_name}
    for queue in built:
        names |= queue.declared
        queue.dispose()
    cleaner = RabbitMqQueue(url=RABBITMQ_URL)  # delete() declares nothing: it deletes either type
    try:
        for name in names:
            cleaner.delete(name)
    finally:
        cleaner.dispose()


def _declares_as(name: str, arguments: dict[str, Any] | None) -> bool:
    """Whether the broker accepts a declaration of ``name`` with ``arguments`` (a 406 means another type)."""
    connection = amqp.Connection(host=BROKER)
    connection.connect()
    try:
        connection.channel().queue_declare(name, durable=True, auto_delete=False, arguments=arguments)
        return True
    except amqp.exceptions.PreconditionFailed:
        return False
    finally:
        connection.close()


def test_the_work_queue_and_every_ladder_tier_are_quorum_queues(
    make_queue: Callable[..., RabbitMqQueue], queue_name: str
) -> None:
    rabbit = make_queue(queue_type="quorum")
    rabbit.push(Records("later"), queue=queue_name, delay=3)  # enters at tier 1: declares tiers 0 and 1

    assert rabbit.stats(queue_name).delayed == 1
    assert rabbit.clear(queue_name) == 1
    assert _declares_as(queue_name, {"x-queue-type": "quorum"})
    assert not _declares_as(queue_name, None)
    for tier in (0, 1):
        # At-least-once dead-lettering (with reject-publish, which it requires) on every tier.
        assert _declares_as(ladder.holding_queue(queue_name, tier), ladder.holding_arguments(queue_name, tier, True))
        assert not _declares_as(ladder.holding_queue(queue_name, tier), ladder.holding_arguments(queue_name, tier))
    # stats() and clear() read the tiers that exist and declare no more (each would be a Raft group).
    assert not queue_exists(ladder.holding_queue(queue_name, 2))


def test_a_delayed_job_comes_down_the_quorum_ladder(make_queue: Callable[..., RabbitMqQueue], queue_name: str) -> None:
    rabbit = make_queue(queue_type="quorum")
    job_id = rabbit.push(Records("later"), queue=queue_name, delay=1)

    assert rabbit.pop(0.01, [queue_name]) is None
    job = rabbit.pop(10, [queue_name])
    assert job is not None and job.id == job_id and job.attempts == 1


def test_a_queue_of_the_other_type_is_refused_naming_queue_type(
    make_queue: Callable[..., RabbitMqQueue], queue_name: str
) -> None:
    make_queue().push(Records("classic"), queue=queue_name)
    quorum = make_queue(queue_type="quorum", connection="jobs")

    with pytest.raises(QueueConfigurationError) as raised:
        quorum.push(Records("quorum"), queue=queue_name)

    assert "KINETIS_QUEUE['CONNECTIONS']['jobs']['QUEUE_TYPE']" in str(raised.value)
    assert "as a quorum queue" in str(raised.value)
    # The connection was dropped with the refused channel; the next use opens a new one.
    assert quorum.queue_known(queue_name)


def test_queue_type_must_be_classic_or_quorum() -> None:
    with pytest.raises(QueueConfigurationError, match="QUEUE_TYPE'] must be one of 'classic', 'quorum'"):
        RabbitMqQueue(url=RABBITMQ_URL, queue_type="stream", connection="jobs")
    with pytest.raises(QueueConfigurationError, match="QUEUE_TYPE"):
        RabbitMqQueue.settings_schema.resolve({"QUEUE_TYPE": "Quorum"}, ("KINETIS_QUEUE", "CONNECTIONS", "jobs"))
    assert RabbitMqQueue.settings_schema.resolve({}, ("KINETIS_QUEUE",))["QUEUE_TYPE"] == "classic"


def test_a_broker_redelivery_goes_behind_the_waiting_jobs_as_a_new_message(
    make_queue: Callable[..., RabbitMqQueue], queue_name: str
) -> None:
    """The poison-pill rule on a quorum queue: the broker returns a dropped connection's delivery to the
    head (with x-delivery-count 1); the next sweep republishes it behind the waiting job, uncharged."""
    first = make_queue(queue_type="quorum")
    pill = first.push(Records("pill"), queue=queue_name)
    waiting = first.push(Records("waiting"), queue=queue_name)
    held = first.pop(5, [queue_name])
    assert held is not None and held.id == pill
    session = first._session
    assert session is not None
    session.connection.sock.shutdown(2)  # the worker holding it dies

    second = make_queue(queue_type="quorum")
    order = []
    for _ in range(2):
        job = second.pop(5, [queue_name])
        assert job is not None
        order.append((job.id, job.attempts))
        second.ack(job)
    assert order == [(waiting, 1), (pill, 1)]


def test_no_delivery_limit_cuts_a_job_given_back_more_often_than_rabbitmq_4s_default(
    make_queue: Callable[..., RabbitMqQueue], queue_name: str
) -> None:
    """No x-delivery-limit is set: 25 unreserve()s at once (each a requeue the broker counts) lose nothing."""
    rabbit = make_queue(queue_type="quorum")
    job_id = rabbit.push(Records("held back"), queue=queue_name, max_attempts=1)
    for _ in range(25):
        job = rabbit.pop(5, [queue_name])
        assert job is not None and job.id == job_id and job.attempts == 1
        rabbit.unreserve(job)
    job = rabbit.pop(5, [queue_name])
    assert job is not None and job.id == job_id
    rabbit.ack(job)
    assert rabbit.size(queue_name) == 0
