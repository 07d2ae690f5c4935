"""SQS queue_known(): only SQS's "no such queue" answer means unknown; any other refusal propagates.

queue_work warns about watched queues that are not known, so a server error read as "unknown"
would tell the operator a queue is missing when SQS merely failed. The relay of
tests/specific/test_sqs_transport.py answers 500 to every GetQueueUrl.
"""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from kinetis_queue.backends.sqs import SqsQueue
from tests.specific.test_sqs_transport import Relay, relay, relayed  # noqa: F401  fixtures

pytestmark = pytest.mark.usefixtures("relay")


def test_a_server_error_on_the_url_lookup_propagates_instead_of_reading_as_unknown(
    relay: Relay,  # noqa: F811
    relayed: SqsQueue,  # noqa: F811
    queue_name: str,
) -> None:
    relay.faults["GetQueueUrl"] = ["answer-500"] * 20  # more than botocore's retries
    with pytest.raises(ClientError) as raised:
        relayed.queue_known(queue_name)
    assert raised.value.response["Error"]["Code"] == "InternalError"
    relay.faults.clear()
    assert relayed.queue_known(queue_name) is True  # the same lookup, answered: the queue exists
    assert relayed.queue_known("q" + "0" * 20) is False  # SQS's own "no such queue" still means unknown
