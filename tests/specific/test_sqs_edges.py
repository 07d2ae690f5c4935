"""SQS backend edges the conformance suite cannot reach: a bad QUEUE_PREFIX, a SendMessage SQS refuses."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from kinetis_queue import connections
from kinetis_queue.backends.sqs.queue import SqsQueue
from kinetis_queue.exceptions import ConnectionFailedError, OutcomeUnknownError, QueueConfigurationError
from tests.jobs import Records
from tests.support.sqs_server import SqsTestQueues


def test_an_invalid_queue_prefix_is_refused_before_any_client_exists() -> None:
    with pytest.raises(QueueConfigurationError, match=r"^queue_prefix "):
        SqsQueue(queue_prefix="no spaces allowed")


def test_a_send_message_sqs_refuses_propagates_as_the_client_error_not_an_unknown_outcome(
    sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    """A 4xx means SQS stored nothing: the caller gets SQS's own error, not "may have been stored"."""
    queue = connections.build("sqs")
    assert isinstance(queue, SqsQueue)
    sqs_queues.prepare(queue)
    try:
        queue.push(Records("first"), queue=queue_name)  # looks the URL up once and keeps it
        sqs_queues.admin.delete_queue(QueueUrl=sqs_queues.urls[queue_name])
        with pytest.raises(ClientError) as caught:
            queue.push(Records("second"), queue=queue_name)
        assert not isinstance(caught.value, (OutcomeUnknownError, ConnectionFailedError))
        assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    finally:
        queue.dispose()


def test_a_long_poll_that_comes_back_empty_before_the_deadline_sweeps_every_queue_again(
    sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    """pop() long-polls only the first queue; when that poll ends empty with time left, it sweeps them all
    again, so a job that became visible meanwhile on a lower-priority queue is still taken."""
    low = queue_name + "-low"
    queue = connections.build("sqs")
    assert isinstance(queue, SqsQueue)
    sqs_queues.prepare(queue)
    try:
        queue.size(queue_name)  # both queues exist before the pop
        job_id = queue.push(Records("later"), delay=2, queue=low)  # invisible to the first sweep
        found = queue.pop(8, [queue_name, low])  # sweep, a 5 s long poll of the first queue, sweep again
        assert found is not None and (found.id, found.queue) == (job_id, low)
        queue.ack(found)
    finally:
        queue.dispose()


def test_a_send_message_batch_sqs_refuses_whole_propagates_as_its_client_error_naming_the_batch(
    sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    """A 4xx for the whole SendMessageBatch (its queue deleted under the pusher) stored none of its jobs: SQS's
    own ClientError, its message saying which jobs and that they were not stored."""
    queue = connections.build("sqs")
    assert isinstance(queue, SqsQueue)
    sqs_queues.prepare(queue)
    try:
        queue.push(Records("first"), queue=queue_name)  # looks the URL up once and keeps it
        sqs_queues.admin.delete_queue(QueueUrl=sqs_queues.urls[queue_name])
        with pytest.raises(ClientError) as caught:
            queue.push_many([Records("a"), Records("b")], queue=queue_name)
        assert not isinstance(caught.value, (OutcomeUnknownError, ConnectionFailedError))
        assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
        assert str(caught.value).startswith(
            "jobs[0]: SendMessageBatch of 2 jobs from jobs[0] (the 0 jobs of earlier batches were sent, no later "
            "batch was) was refused; those jobs were not stored: "
        )
    finally:
        queue.dispose()
