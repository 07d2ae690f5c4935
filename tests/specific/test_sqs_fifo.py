"""SQS FIFO queues (FIFO True, issue 20) against moto's server, beyond the conformance suite's sqs-fifo row.

The deduplication id makes a re-send after a lost reply safe (the one re-send that is not blind), the
group id decides order and concurrency, and delays are emulated (FIFO refuses DelaySeconds).
docs/backends/sqs.md, "FIFO queues".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kinetis_queue.backends.sqs.queue import SqsQueue
from kinetis_queue.exceptions import InvalidQueueArgumentError, QueueConfigurationError
from tests.jobs import Records
from tests.specific.test_sqs import Calls
from tests.support.sqs_server import MotoServer, SqsTestQueues


@pytest.fixture
def make_fifo(moto_server: MotoServer, sqs_queues: SqsTestQueues) -> Iterator[Callable[..., SqsQueue]]:
    """FIFO SqsQueues on moto (deliveries hidden 30 s, so no test races a visibility timeout)."""
    built: list[SqsQueue] = []

    def make(**options: Any) -> SqsQueue:
        queue = SqsQueue(
            region="us-east-1", endpoint_url=moto_server.endpoint, visibility_timeout=30, fifo=True, **options
        )
        sqs_queues.prepare(queue)
        built.append(queue)
        return queue

    yield make
    for queue in built:
        queue.dispose()


def _stored(sqs_queues: SqsTestQueues, name: str) -> list[dict[str, Any]]:
    """Every message of the SQS queue ``name``, received by the admin client (and left hidden)."""
    url = sqs_queues.create(name)
    messages: list[dict[str, Any]] = []
    while True:
        response = sqs_queues.admin.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30, MessageSystemAttributeNames=["All"]
        )
        if not response.get("Messages"):
            return messages
        messages += response["Messages"]


def test_fifo_queue_names_end_in_fifo(make_fifo: Callable[..., SqsQueue], queue_name: str) -> None:
    sqs = make_fifo()
    assert sqs.sqs_name(queue_name) == queue_name + ".fifo"
    with pytest.raises(InvalidQueueArgumentError, match=r"'\.fifo' suffix of a FIFO queue"):
        sqs.push(Records("x"), queue=(queue_name + "x" * 80)[:76])


def test_a_send_repeated_after_a_lost_reply_is_stored_once(
    make_fifo: Callable[..., SqsQueue], sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    """The reply of the first SendMessage is "lost": the caller sends the same PreparedPush again (and the
    same batch again), inside the five-minute window. SQS keeps one message per job."""
    sqs = make_fifo()
    prepared = sqs.prepare(Records("once"), queue=queue_name)
    assert sqs.send(prepared) == sqs.send(prepared)
    batch = [sqs.prepare(Records(f"batch {i}"), queue=queue_name) for i in range(3)]
    sqs.send_many(batch)
    sqs.send_many(batch)

    messages = _stored(sqs_queues, queue_name + ".fifo")
    ids = sorted(m["Attributes"]["MessageDeduplicationId"].split("-")[0] for m in messages)
    assert ids == sorted([prepared.envelope.id] + [p.envelope.id for p in batch])
    for message in messages:  # MESSAGE_GROUP "message": each message is its own group
        assert message["Attributes"]["MessageGroupId"] == message["Attributes"]["MessageDeduplicationId"]


def test_a_different_message_under_the_same_id_is_not_taken_for_a_repeat(
    make_fifo: Callable[..., SqsQueue], queue_name: str
) -> None:
    """unreserve() sends the job again under its id, maybe byte for byte: it is stored, not deduplicated."""
    sqs = make_fifo()
    job_id = sqs.push(Records("given back"), queue=queue_name)
    first = sqs.pop(5, [queue_name])
    assert first is not None
    sqs.unreserve(first)
    again = sqs.pop(5, [queue_name])
    assert again is not None and again.id == job_id and again.attempts == 1
    sqs.ack(again)
    assert sqs.size(queue_name) == 0


def test_group_per_queue_delivers_in_order_one_job_in_flight_at_a_time(
    make_fifo: Callable[..., SqsQueue], sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    sqs = make_fifo(message_group="queue")
    pushed = [sqs.push(Records(f"job {i}"), queue=queue_name) for i in range(3)]
    # Every message of the queue is in one group, named after the queue.
    url = sqs_queues.create(queue_name + ".fifo")
    peek = sqs_queues.admin.receive_message(
        QueueUrl=url, MaxNumberOfMessages=1, VisibilityTimeout=0, MessageSystemAttributeNames=["MessageGroupId"]
    )
    assert peek["Messages"][0]["Attributes"]["MessageGroupId"] == queue_name

    order = []
    for _ in pushed:
        job = sqs.pop(5, [queue_name])
        assert job is not None
        assert sqs.pop(0.01, [queue_name]) is None  # the group is held while its job is in flight
        order.append(job.id)
        sqs.ack(job)
    assert order == pushed


def test_a_delay_is_emulated_and_its_early_receive_is_not_an_attempt(
    make_fifo: Callable[..., SqsQueue], queue_name: str
) -> None:
    """FIFO refuses DelaySeconds (it is never sent): the delay travels as an attribute, a worker that meets
    the message early hides it until due, and the attempt number leaves that receive out."""
    sqs = make_fifo()
    calls = Calls(sqs)
    job_id = sqs.push(Records("later"), queue=queue_name, delay=2)
    assert [name for name, params, _ in calls.seen if "DelaySeconds" in params] == []

    assert sqs.pop(0.01, [queue_name]) is None  # met early: hidden for the rest of its delay
    job = sqs.pop(10, [queue_name])
    assert job is not None and job.id == job_id
    assert job.attempts == 1
    sqs.release(job, delay=1)  # a retry's backoff: a visibility timeout, which FIFO allows
    retried = sqs.pop(10, [queue_name])
    assert retried is not None and retried.id == job_id and retried.attempts == 2
    sqs.ack(retried)


def test_message_group_must_be_message_or_queue() -> None:
    with pytest.raises(QueueConfigurationError, match="message_group must be one of 'message', 'queue'"):
        SqsQueue(fifo=True, message_group="job")
    with pytest.raises(QueueConfigurationError, match="MESSAGE_GROUP"):
        SqsQueue.settings_schema.resolve({"MESSAGE_GROUP": "key"}, ("KINETIS_QUEUE", "CONNECTIONS", "jobs"))
    with pytest.raises(QueueConfigurationError, match="FIFO"):
        SqsQueue.settings_schema.resolve({"FIFO": "yes"}, ("KINETIS_QUEUE", "CONNECTIONS", "jobs"))
