"""SQS backend: the documented retry choice, shown with lost replies (contract: "What push() guarantees").

A small TCP relay sits between the backend and moto's server. It forwards every request to the
real server, which applies it, and can then lose the reply (close the connection unanswered),
answer 500 instead, or stop listening altogether: the failures a network or SQS itself can
produce, which no SQS-compatible server produces on demand.
"""

from __future__ import annotations

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
from kinetis_queue.exceptions import ConnectionFailedError, OutcomeUnknownError
from tests.jobs import Records
from tests.support.sqs_server import MotoServer, SqsTestQueues

TARGET = re.compile(rb"(?im)^x-amz-target:\s*AmazonSQS\.(\w+)\s*$")
LENGTH = re.compile(rb"(?im)^content-length:\s*(\d+)\s*$")
INTERNAL_ERROR = (
    b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/x-amz-json-1.0\r\n"
    b"Content-Length: 56\r\nConnection: close\r\n\r\n"
    b'{"__type":"InternalError","message":"relay says 500!!!"}'
)


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
        with socket.create_connection(self.server.upstream, timeout=30) as upstream:
            upstream.sendall(request)
            reply = b"".join(iter(lambda: upstream.recv(65536), b""))  # moto closes after each reply
        pending = self.server.faults.get(operation) or []
        fault = pending.pop(0) if pending else None
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
