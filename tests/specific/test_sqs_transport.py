"""SQS backend: the documented retry choice, shown with lost replies (contract: "What push() guarantees").

A small TCP relay sits between the backend and moto's server. It forwards every request to the
real server, which applies it, and can then lose the reply (close the connection unanswered),
answer 500 instead, or stop listening altogether: the failures a network or SQS itself can
produce, which no SQS-compatible server produces on demand. It can also answer in SQS's place
without forwarding (the request is not applied), with answers SQS gives and moto never does: a
500, a batch whose entries all failed on SQS's side (SenderFault false), and the
InvalidParameterValue SQS gives for an expired receipt handle.
"""

from __future__ import annotations

import json
import re
import socket
import socketserver
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from botocore.exceptions import ClientError

from kinetis_queue.backends.sqs import SqsQueue
from kinetis_queue.contracts import JobSettlement
from kinetis_queue.exceptions import ConnectionFailedError, OutcomeUnknownError, StaleJobHandleError
from tests.jobs import Records
from tests.support.sqs_server import MotoServer, SqsTestQueues

TARGET = re.compile(rb"(?im)^x-amz-target:\s*AmazonSQS\.(\w+)\s*$")
LENGTH = re.compile(rb"(?im)^content-length:\s*(\d+)\s*$")
INTERNAL_ERROR = (
    b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/x-amz-json-1.0\r\n"
    b"Content-Length: 56\r\nConnection: close\r\n\r\n"
    b'{"__type":"InternalError","message":"relay says 500!!!"}'
)
#: What SQS answers ChangeMessageVisibility with once a receipt handle has expired (moto says ReceiptHandleIsInvalid).
EXPIRED_RECEIPT = {
    "__type": "InvalidParameterValue",
    "message": "Value AQEB for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired.",
}


def _answer(status: str, body: dict[str, Any]) -> bytes:
    data = json.dumps(body).encode()
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: {len(data)}\r\n"
    return head.encode() + b"Connection: close\r\n\r\n" + data


def _unapplied(fault: str, request: bytes) -> bytes | None:
    """The answer SQS's side gives without applying the request, for the faults that do not forward it."""
    if fault == "unapplied-500":
        return INTERNAL_ERROR
    if fault == "expired-receipt":
        return _answer("400 Bad Request", EXPIRED_RECEIPT)
    if fault == "entries-failed":
        entries = json.loads(request.partition(b"\r\n\r\n")[2])["Entries"]
        failed = [
            {"Id": entry["Id"], "SenderFault": False, "Code": "InternalError", "Message": "relay says try again"}
            for entry in entries
        ]
        return _answer("200 OK", {"Successful": [], "Failed": failed})
    return None


class Relay(socketserver.ThreadingTCPServer):
    """Forwards each request to moto's server; ``faults[operation]`` lists what to do with its next replies."""

    allow_reuse_address = True
    daemon_threads = True

    def __init__(self, upstream: tuple[str, int]) -> None:
        super().__init__(("127.0.0.1", 0), _RelayRequest)
        self.upstream = upstream
        self.seen: list[str] = []
        self.faults: dict[str, list[str]] = {}

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _RelayRequest(socketserver.BaseRequestHandler):
    server: Relay

    def handle(self) -> None:
        request = self._read_request()
        if request is None:
            return
        match = TARGET.search(request)
        operation = match.group(1).decode() if match else "?"
        self.server.seen.append(operation)
        pending = self.server.faults.get(operation) or []
        fault = pending.pop(0) if pending else None
        answer = _unapplied(fault, request) if fault else None
        if answer is not None:
            self.request.sendall(answer)
            return
        with socket.create_connection(self.server.upstream, timeout=30) as upstream:
            upstream.sendall(request)
            reply = b"".join(iter(lambda: upstream.recv(65536), b""))  # moto closes after each reply
        if fault == "lose-reply":
            return  # the request was applied; the client sees the connection close unanswered
        self.request.sendall(INTERNAL_ERROR if fault == "answer-500" else reply)

    def _read_request(self) -> bytes | None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.request.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = LENGTH.search(head)
        while length is not None and len(body) < int(length.group(1)):
            body += self.request.recv(65536)
        return head + b"\r\n\r\n" + body


@pytest.fixture
def relay(moto_server: MotoServer) -> Iterator[Relay]:
    target = urlsplit(moto_server.endpoint)
    server = Relay((target.hostname or "127.0.0.1", target.port or 80))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def relayed(relay: Relay, sqs_queues: SqsTestQueues) -> Iterator[SqsQueue]:
    """An SqsQueue whose every request goes through the relay."""
    queue = SqsQueue(region="us-east-1", endpoint_url=relay.endpoint, visibility_timeout=1)
    sqs_queues.prepare(queue)
    yield queue
    queue.dispose()


def _stored(sqs_queues: SqsTestQueues, queue: str) -> int:
    attributes: dict[str, Any] = sqs_queues.admin.get_queue_attributes(
        QueueUrl=sqs_queues.create(queue), AttributeNames=["All"]
    )["Attributes"]
    return sum(int(attributes[k]) for k in attributes if k.startswith("ApproximateNumberOfMessages"))


def test_a_lost_send_reply_is_outcome_unknown_and_never_resent(
    relay: Relay, relayed: SqsQueue, sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    """SendMessage is sent once: after a lost reply a retry would store a second copy (standard queues have no
    deduplication), so the push raises OutcomeUnknownError and the caller decides."""
    relayed.size(queue_name)  # resolve the URL first
    relay.seen.clear()
    relay.faults["SendMessage"] = ["lose-reply"]

    with pytest.raises(OutcomeUnknownError, match="may have been stored"):
        relayed.push(Records("once"), queue=queue_name)

    assert relay.seen == ["SendMessage"]
    assert _stored(sqs_queues, queue_name) == 1  # SQS did store it: exactly one copy


def test_a_5xx_answer_to_send_is_outcome_unknown_and_never_resent(
    relay: Relay, relayed: SqsQueue, sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    """A 5xx does not prove SendMessage was not applied (here it was): OutcomeUnknownError, one request."""
    relayed.size(queue_name)
    relay.seen.clear()
    relay.faults["SendMessage"] = ["answer-500"]

    with pytest.raises(OutcomeUnknownError) as raised:
        relayed.push(Records("once"), queue=queue_name)

    assert isinstance(raised.value.__cause__, ClientError)
    assert relay.seen == ["SendMessage"]
    assert _stored(sqs_queues, queue_name) == 1


def test_a_send_that_never_left_is_connection_failed(
    relay: Relay, relayed: SqsQueue, sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    """A refused connection proves nothing was sent: ConnectionFailedError, and nothing is stored."""
    relayed.size(queue_name)
    relay.shutdown()
    relay.server_close()  # nothing listens on the relay's port any more

    with pytest.raises(ConnectionFailedError, match="not stored"):
        relayed.push(Records("never"), queue=queue_name)

    assert _stored(sqs_queues, queue_name) == 0


def test_a_first_push_whose_url_lookup_fails_is_connection_failed(
    relay: Relay, relayed: SqsQueue, sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    """A queue's first push looks its URL up first: when that fails, SendMessage never left, so the push
    raises ConnectionFailedError (nothing stored), not the transport's own error."""
    relay.faults["GetQueueUrl"] = ["lose-reply"] * 3  # every attempt of botocore's retries

    with pytest.raises(ConnectionFailedError, match="not stored"):
        relayed.push(Records("never"), queue=queue_name)

    assert "SendMessage" not in relay.seen
    assert _stored(sqs_queues, queue_name) == 0


def test_other_calls_are_retried_by_botocore(
    relay: Relay, relayed: SqsQueue, sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    """Every call but SendMessage uses botocore's standard retries: repeating it cannot duplicate a job."""
    relay.faults["GetQueueAttributes"] = ["lose-reply"]
    relay.faults["DeleteMessage"] = ["answer-500"]
    relayed.push(Records("kept"), queue=queue_name)

    assert relayed.size(queue_name) == 1
    job = relayed.pop(5, [queue_name])
    assert job is not None
    relayed.ack(job)

    assert relay.seen.count("GetQueueAttributes") == 2
    assert relay.seen.count("DeleteMessage") == 2
    assert _stored(sqs_queues, queue_name) == 0


def test_a_lost_batch_reply_stops_push_many_there_naming_its_first_job(
    relay: Relay, relayed: SqsQueue, sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    """SendMessageBatch is sent once like SendMessage: the second batch's reply is lost, so push_many raises
    OutcomeUnknownError naming jobs[10]; the first batch is stored, the lost one was applied (here), the third
    batch was never sent."""
    relayed.size(queue_name)
    relay.seen.clear()
    relay.faults["SendMessageBatch"] = ["ok", "lose-reply"]

    with pytest.raises(OutcomeUnknownError, match=r"^jobs\[10\]: .*may have been stored"):
        relayed.push_many([Records(f"job-{i}") for i in range(25)], queue=queue_name)

    assert relay.seen == ["SendMessageBatch", "SendMessageBatch"]
    assert _stored(sqs_queues, queue_name) == 20


def test_a_push_many_that_never_left_is_connection_failed(
    relay: Relay, relayed: SqsQueue, sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    relayed.size(queue_name)
    relay.shutdown()
    relay.server_close()

    with pytest.raises(ConnectionFailedError, match=r"^jobs\[0\]: .*not stored"):
        relayed.push_many([Records("a"), Records("b")], queue=queue_name)

    assert _stored(sqs_queues, queue_name) == 0


def test_delete_message_batch_is_retried_by_botocore(
    relay: Relay, relayed: SqsQueue, sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    """Repeating a DeleteMessageBatch cannot duplicate a job, so it keeps botocore's standard retries."""
    relayed.push_many([Records("a"), Records("b")], queue=queue_name)
    held = relayed.pop_many(5, [queue_name], 2).jobs
    assert len(held) == 2
    relay.faults["DeleteMessageBatch"] = ["lose-reply"]

    assert relayed.ack_many(held) == [None, None]

    assert relay.seen.count("DeleteMessageBatch") == 2
    assert _stored(sqs_queues, queue_name) == 0


def test_a_5xx_batch_after_a_refused_entry_is_unknown_and_names_the_refused_job(
    relay: Relay, relayed: SqsQueue, sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    """The first batch stores every job but jobs[3] (an entry SQS refuses); the second batch is answered 500
    (applied here): push_many raises OutcomeUnknownError for that batch, and its note names jobs[3], refused
    earlier and not stored, which the caller would otherwise never learn."""

    def corrupt(params: dict[str, Any], **kwargs: Any) -> None:
        if params["Entries"][0]["Id"] == "0":
            params["Entries"][3]["DelaySeconds"] = 901

    relayed.send_client.meta.events.register("before-parameter-build.sqs.SendMessageBatch", corrupt)
    relayed.size(queue_name)
    relay.seen.clear()
    relay.faults["SendMessageBatch"] = ["ok", "answer-500"]

    with pytest.raises(OutcomeUnknownError, match=r"^jobs\[10\]: .*failed in SQS; those jobs may have been stored"):
        try:
            relayed.push_many([Records(f"job-{i}") for i in range(12)], queue=queue_name)
        except OutcomeUnknownError as exc:
            assert exc.__notes__ == ["SQS had refused these jobs of earlier batches, which were not stored: jobs[3]"]
            raise

    assert relay.seen == ["SendMessageBatch", "SendMessageBatch"]  # sent once, never retried
    assert _stored(sqs_queues, queue_name) == 11


def test_a_failed_batch_entry_is_deleted_again_on_its_own(
    relay: Relay, relayed: SqsQueue, sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    """SQS may fail a DeleteMessageBatch entry on its side (SenderFault false, not a stale receipt): each such
    receipt gets a DeleteMessage of its own, and ack_many reports success."""
    relayed.push_many([Records("a"), Records("b")], queue=queue_name)
    held = relayed.pop_many(5, [queue_name], 2).jobs
    assert len(held) == 2
    relay.seen.clear()
    relay.faults["DeleteMessageBatch"] = ["entries-failed"]

    assert relayed.ack_many(held) == [None, None]

    assert relay.seen == ["DeleteMessageBatch", "DeleteMessage", "DeleteMessage"]
    assert _stored(sqs_queues, queue_name) == 0


def test_a_failed_batch_entry_whose_receipt_is_gone_by_the_retry_is_reported_stale(
    relay: Relay, relayed: SqsQueue, sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    relayed.push(Records("purged"), queue=queue_name)
    held = relayed.pop_many(5, [queue_name], 1).jobs
    assert len(held) == 1
    sqs_queues.admin.purge_queue(QueueUrl=sqs_queues.urls[queue_name])  # someone else removed it
    relay.faults["DeleteMessageBatch"] = ["entries-failed"]

    [result] = relayed.ack_many(held)

    assert isinstance(result, StaleJobHandleError) and result.operation is JobSettlement.ACK
    assert relay.seen.count("DeleteMessage") == 1


def test_a_failed_batch_entry_whose_retry_fails_raises(
    relay: Relay, relayed: SqsQueue, sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    """The DeleteMessage of a failed entry fails too (after botocore's retries): raised, the delivery not
    deleted, so it comes back when its visibility timeout ends (at-least-once)."""
    relayed.push(Records("kept"), queue=queue_name)
    held = relayed.pop_many(5, [queue_name], 1).jobs
    assert len(held) == 1
    relay.faults["DeleteMessageBatch"] = ["entries-failed"]
    relay.faults["DeleteMessage"] = ["unapplied-500"] * 20  # more than botocore's retries

    with pytest.raises(ClientError) as raised:
        relayed.ack_many(held)

    assert raised.value.response["Error"]["Code"] == "InternalError"
    assert _stored(sqs_queues, queue_name) == 1
    relay.faults.clear()
    again = relayed.pop(10, [queue_name])
    assert again is not None and again.id == held[0].id
    relayed.ack(again)


def test_unreserve_of_an_expired_receipt_is_stale_and_sends_nothing(
    relay: Relay, relayed: SqsQueue, sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    """SQS answers ChangeMessageVisibility on an expired receipt with InvalidParameterValue ("parameter
    ReceiptHandle is invalid"), not ReceiptHandleIsInvalid: that too is a receipt no longer held."""
    relayed.push(Records("expired"), queue=queue_name)
    job = relayed.pop(5, [queue_name])
    assert job is not None
    relay.seen.clear()
    relay.faults["ChangeMessageVisibility"] = ["expired-receipt"]

    with pytest.raises(StaleJobHandleError) as raised:
        relayed.unreserve(job)

    assert raised.value.operation is JobSettlement.UNRESERVE
    assert relay.seen == ["ChangeMessageVisibility"]  # no copy sent, nothing deleted
    assert _stored(sqs_queues, queue_name) == 1


def test_unreserve_whose_fence_call_fails_raises_and_sends_nothing(
    relay: Relay, relayed: SqsQueue, sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    relayed.push(Records("held"), queue=queue_name)
    job = relayed.pop(5, [queue_name])
    assert job is not None
    relay.seen.clear()
    relay.faults["ChangeMessageVisibility"] = ["unapplied-500"] * 20

    with pytest.raises(ClientError) as raised:
        relayed.unreserve(job)

    assert raised.value.response["Error"]["Code"] == "InternalError"
    assert set(relay.seen) == {"ChangeMessageVisibility"}
    assert _stored(sqs_queues, queue_name) == 1


def test_unreserve_whose_delete_fails_after_the_copy_raises_saying_a_duplicate_comes_back(
    relay: Relay, relayed: SqsQueue, sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    """The copy was stored, the delivered message not deleted: raised with a note; both are stored (the old one
    is delivered again when its visibility timeout ends, a duplicate delivery as at-least-once allows)."""
    relayed.push(Records("twice"), queue=queue_name)
    job = relayed.pop(5, [queue_name])
    assert job is not None
    relay.seen.clear()
    relay.faults["DeleteMessage"] = ["unapplied-500"] * 20

    with pytest.raises(ClientError) as raised:
        relayed.unreserve(job)

    assert raised.value.response["Error"]["Code"] == "InternalError"
    assert any("had already stored the job again" in note for note in raised.value.__notes__)
    assert relay.seen[:2] == ["ChangeMessageVisibility", "SendMessage"]
    assert _stored(sqs_queues, queue_name) == 2
