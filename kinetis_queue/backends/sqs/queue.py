"""SqsQueue: jobs as Amazon SQS messages, sent and received through boto3 (contract: "Backend mechanisms: SQS")."""

from __future__ import annotations

import math
import re
import threading
import time
from collections.abc import Sequence
from typing import Any, NamedTuple, Self

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectTimeoutError, EndpointConnectionError, HTTPClientError
from botocore.exceptions import ConnectionError as BotocoreConnectionError

from kinetis_queue.backends.sqs.options import (
    MAX_DELAY,
    MAX_SQS_NAME,
    MAX_VISIBILITY_TIMEOUT,
    OPTIONS,
    QUEUE_PREFIX_RULE,
    is_queue_prefix,
)
from kinetis_queue.conf import ConnectionSettings
from kinetis_queue.contracts import DisposableQueue, PreparedPush, QueuedJob, QueueStats, RenewableQueue
from kinetis_queue.envelope import (
    Envelope,
    decode_body,
    decode_metadata,
    dumps,
    encode_body,
    envelope_from_body,
    expect,
    loads,
    settle_if_malformed,
)
from kinetis_queue.exceptions import (
    ConnectionFailedError,
    InvalidQueueArgumentError,
    MalformedQueuedJobDataError,
    OutcomeUnknownError,
    QueueConfigurationError,
)
from kinetis_queue.validation import MAX_COUNTER, validate_queue_list, validate_queue_name, validate_timeout

#: The largest message SQS accepts, body and message attributes together (1 MiB since August 2025).
MAX_MESSAGE_BYTES = 1_048_576
#: The longest long poll between two sweeps (contract: "The pop() priority/timeout contract").
LONG_POLL = 5
#: Seconds to open a connection, and to wait for a reply (a long poll answers within LONG_POLL).
CONNECT_TIMEOUT = 5
READ_TIMEOUT = 20
#: The message attributes this backend writes; at most two of SQS's ten.
#: The error codes GetQueueUrl answers for a queue that does not exist (query and JSON protocols).
NONEXISTENT_QUEUE_CODES = frozenset(("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"))
MAX_ATTEMPTS_ATTRIBUTE = "maxAttempts"
METADATA_ATTRIBUTE = "metadata"
#: A stored count in canonical decimal form.
COUNT = re.compile(r"0|[1-9][0-9]{0,9}")


class SqsHandle(NamedTuple):
    """The delivery receipt: the queue's URL and the ReceiptHandle this receive returned."""

    queue_url: str
    receipt_handle: str


class SqsQueue(RenewableQueue, DisposableQueue):
    """Jobs as messages on existing standard SQS queues (FIFO queues are not supported).

    Message: the body is ASCII-escaped JSON holding ``id``, ``pushedAt``, ``class`` and ``args``, so
    SQS's character rules can never alter it; ``maxAttempts`` is a Number attribute when set, and
    non-empty metadata one JSON String attribute. The attempt number is SQS's ApproximateReceiveCount.
    Reservation: each receive hides the message for VISIBILITY_TIMEOUT seconds, best-effort: SQS may
    deliver it again within that window (contract: "At-least-once delivery").
    Fence: none. ack/fail delete, release/renew change the visibility of the ReceiptHandle, and SQS
    answers a stale handle itself: its error propagates, or it accepts and nothing reports the lost
    delivery, so a handler must be idempotent (contract: "Delivery receipts and stale settlements").
    Queues: a name (QUEUE_PREFIX + queue) resolves through GetQueueUrl once per instance; no queue is
    ever created. size() is ApproximateNumberOfMessages + ApproximateNumberOfMessagesDelayed, which
    leaves out in-flight messages, a delayed release() included. Not a ClearableQueue: PurgeQueue also
    deletes in-flight messages, reports no count and runs once a minute (contract, "SQS").

    Retries: SendMessage is sent once. botocore's retries would repeat a request whose reply was lost,
    and SQS standard queues have no deduplication, so a retry could store a second copy. A failure
    before the request left raises ConnectionFailedError (nothing was stored); a lost reply or a 5xx
    raises OutcomeUnknownError (the message may be stored); a 4xx refusal propagates as botocore's
    ClientError. Every other call uses botocore's "standard" retry mode, since repeating it cannot
    duplicate a job. Both clients are thread-safe and shared by the worker and its heartbeat thread;
    they are built on first use, with boto3's credential chain, and closed by dispose().
    """

    backend_name = "sqs"
    settings_schema = OPTIONS

    def __init__(
        self,
        *,
        region: str | None = None,
        endpoint_url: str | None = None,
        queue_prefix: str = "",
        visibility_timeout: int = 300,
        connection: str | None = None,
    ) -> None:
        super().__init__(connection=connection)
        # Validated before any client exists (contract: QUEUE_VISIBILITY_TIMEOUT_SECONDS, 1 to MAX_VISIBILITY_TIMEOUT).
        if type(visibility_timeout) is not int or not 1 <= visibility_timeout <= MAX_VISIBILITY_TIMEOUT:
            raise QueueConfigurationError(f"visibility_timeout must be an int from 1 to {MAX_VISIBILITY_TIMEOUT}")
        if not is_queue_prefix(queue_prefix):
            raise QueueConfigurationError(f"queue_prefix {QUEUE_PREFIX_RULE}")
        self.region = region
        self.endpoint_url = endpoint_url
        self.queue_prefix = queue_prefix
        self._visibility_timeout = visibility_timeout
        self._clients: tuple[Any, Any] | None = None
        self._clients_lock = threading.Lock()
        self._urls: dict[str, str] = {}

    @classmethod
    def from_settings(cls, settings: ConnectionSettings) -> Self:
        return cls(
            region=settings.options["REGION"],
            endpoint_url=settings.options["ENDPOINT_URL"],
            queue_prefix=settings.options["QUEUE_PREFIX"],
            visibility_timeout=settings.visibility_timeout,
            connection=settings.name,
        )

    # -- clients ----------------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        """The boto3 SQS client for every call but SendMessage (botocore's standard retries)."""
        return self._built()[0]

    @property
    def send_client(self) -> Any:
        """The boto3 SQS client for SendMessage, with botocore's retries off."""
        return self._built()[1]

    def _built(self) -> tuple[Any, Any]:
        clients = self._clients
        if clients is None:
            with self._clients_lock:
                clients = self._clients
                if clients is None:
                    clients = self._clients = (self._new_client(3), self._new_client(1))
        return clients

    def _new_client(self, attempts: int) -> Any:
        config = Config(
            connect_timeout=CONNECT_TIMEOUT,
            read_timeout=READ_TIMEOUT,
            retries={"mode": "standard", "total_max_attempts": attempts},
        )
        # A boto3 Session is not thread-safe, so each client gets its own; the client itself is.
        session = boto3.session.Session()
        return session.client("sqs", region_name=self.region, endpoint_url=self.endpoint_url, config=config)

    def dispose(self) -> None:
        with self._clients_lock:
            clients, self._clients = self._clients, None
        for client in clients or ():
            client.close()

    # -- push -------------------------------------------------------------------------------------

    def _check_push(self, prepared: PreparedPush) -> None:
        """SQS's own limits (name length, delay cap, message size), checked by prepare() before any I/O."""
        self._sqs_name(prepared.queue)
        self._message(prepared.envelope, prepared.delay)

    def _message(self, envelope: Envelope, delay: float) -> dict[str, Any]:
        """SendMessage's arguments, less the queue URL; rejects what SQS would refuse."""
        if delay > MAX_DELAY:
            raise InvalidQueueArgumentError(f"delay must be at most {MAX_DELAY} seconds on SQS")
        body = encode_body(envelope)
        attributes: dict[str, dict[str, str]] = {}
        if envelope.max_attempts is not None:
            attributes[MAX_ATTEMPTS_ATTRIBUTE] = {"DataType": "Number", "StringValue": str(envelope.max_attempts)}
        if envelope.metadata:
            attributes[METADATA_ATTRIBUTE] = {"DataType": "String", "StringValue": dumps(envelope.metadata)}
        # dumps() writes ASCII only, so characters are bytes here.
        size = len(body) + sum(len(k) + len(v["DataType"]) + len(v["StringValue"]) for k, v in attributes.items())
        if size > MAX_MESSAGE_BYTES:
            raise InvalidQueueArgumentError(
                f"the job's SQS message would be {size} bytes; SQS accepts at most {MAX_MESSAGE_BYTES}"
            )
        message: dict[str, Any] = {"MessageBody": body, "DelaySeconds": math.ceil(delay)}
        if attributes:
            message["MessageAttributes"] = attributes
        return message

    def _push(self, envelope: Envelope, delay: float, queue: str) -> None:
        message = self._message(envelope, delay)
        try:
            url = self._url(queue)
        except (HTTPClientError, BotocoreConnectionError) as exc:
            # The lookup (GetQueueUrl, retried like every call but SendMessage) failed: nothing was sent.
            raise ConnectionFailedError(
                f"SendMessage was not sent: the queue's URL lookup failed; the job was not stored: {exc}"
            ) from exc
        try:
            self.send_client.send_message(QueueUrl=url, **message)
        except (EndpointConnectionError, ConnectTimeoutError) as exc:
            raise ConnectionFailedError(f"SendMessage never reached SQS; the job was not stored: {exc}") from exc
        except (HTTPClientError, BotocoreConnectionError) as exc:
            raise OutcomeUnknownError(f"SendMessage got no reply; the job may have been stored: {exc}") from exc
        except ClientError as exc:
            if _status(exc) >= 500:
                raise OutcomeUnknownError(f"SQS failed SendMessage; the job may have been stored: {exc}") from exc
            raise

    # -- pop --------------------------------------------------------------------------------------

    def pop(self, timeout: float, queues: Sequence[str]) -> QueuedJob | None:
        """Sweep every queue with WaitTimeSeconds 0, then long-poll the first for up to 5 s, until the deadline.

        Contract, "The pop() priority/timeout contract": the long poll reserves what it finds, so it is
        this loop's wait as well as a probe. It lasts whole seconds, so it can outlast the deadline by
        up to a second; the deadline is checked again as soon as it returns empty.
        """
        seconds = validate_timeout(timeout)
        names = validate_queue_list(queues)
        for name in names:
            self._sqs_name(name)
        if not names:
            return None
        deadline = None if seconds == 0 else time.monotonic() + seconds
        while True:
            found = self._sweep(names)
            if found is not None:
                return found
            wait = LONG_POLL
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                wait = min(LONG_POLL, math.ceil(left))
            found = self._receive(names[0], wait)
            if found is not None:
                return found
            if deadline is not None and time.monotonic() >= deadline:
                return None

    def _sweep(self, queues: tuple[str, ...]) -> QueuedJob | None:
        for name in queues:
            found = self._receive(name, 0)
            if found is not None:
                return found
        return None

    def _receive(self, queue: str, wait: int) -> QueuedJob | None:
        url = self._url(queue)
        response = self.client.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=1,
            WaitTimeSeconds=wait,
            # Overrides the queue's own attribute for the messages this application takes.
            VisibilityTimeout=self._visibility_timeout,
            MessageSystemAttributeNames=["ApproximateReceiveCount"],
            MessageAttributeNames=[MAX_ATTEMPTS_ATTRIBUTE, METADATA_ATTRIBUTE],
        )
        messages = response.get("Messages") or []
        if not messages:
            return None
        message: dict[str, Any] = messages[0]
        receipt = message["ReceiptHandle"]
        handle = SqsHandle(url, receipt)
        return settle_if_malformed(
            lambda: decode_message(message, queue, handle),
            lambda: self.client.delete_message(QueueUrl=url, ReceiptHandle=receipt),
        )

    # -- settlements and renewal ------------------------------------------------------------------

    def ack(self, job: QueuedJob) -> None:
        handle = _handle(job)
        self.client.delete_message(QueueUrl=handle.queue_url, ReceiptHandle=handle.receipt_handle)

    def fail(self, job: QueuedJob) -> None:
        handle = _handle(job)
        self.client.delete_message(QueueUrl=handle.queue_url, ReceiptHandle=handle.receipt_handle)

    def _release(self, job: QueuedJob, delay: float) -> None:
        # Contract, "release() across backends": the delay is the new visibility timeout, counted from
        # this call. SQS may still refuse a value inside the field's range once less than that is left
        # of the message's own 12 hours; that refusal propagates with nothing settled.
        if delay > MAX_VISIBILITY_TIMEOUT:
            raise InvalidQueueArgumentError(f"release delay must be at most {MAX_VISIBILITY_TIMEOUT} seconds on SQS")
        handle = _handle(job)
        self.client.change_message_visibility(
            QueueUrl=handle.queue_url, ReceiptHandle=handle.receipt_handle, VisibilityTimeout=math.ceil(delay)
        )

    def visibility_timeout(self) -> int:
        return self._visibility_timeout

    def renew(self, job: QueuedJob) -> None:
        # Contract, "Reservation renewal": the full window again, counted from this call. SQS counts its
        # 12-hour maximum from the receive, so a job running past it is redelivered whatever is sent.
        handle = _handle(job)
        self.client.change_message_visibility(
            QueueUrl=handle.queue_url, ReceiptHandle=handle.receipt_handle, VisibilityTimeout=self._visibility_timeout
        )

    # -- size -------------------------------------------------------------------------------------

    def _size(self, queue: str) -> int:
        response = self.client.get_queue_attributes(
            QueueUrl=self._url(queue),
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"],
        )
        attributes: dict[str, str] = response["Attributes"]
        return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesDelayed"])

    def _stats(self, queue: str) -> QueueStats:
        """SQS's three approximate counts from one GetQueueAttributes call; no message is received.

        Reserved is ApproximateNumberOfMessagesNotVisible: every in-flight message, so a delayed
        release() (a visibility timeout, not a delay) counts there and not as delayed, as in size().
        """
        response = self.client.get_queue_attributes(
            QueueUrl=self._url(queue),
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesDelayed",
                "ApproximateNumberOfMessagesNotVisible",
            ],
        )
        attributes: dict[str, str] = response["Attributes"]
        ready = int(attributes["ApproximateNumberOfMessages"])
        delayed = int(attributes["ApproximateNumberOfMessagesDelayed"])
        reserved = int(attributes["ApproximateNumberOfMessagesNotVisible"])
        return QueueStats(waiting=ready + delayed, ready=ready, delayed=delayed, reserved=reserved, approximate=True)

    # -- queue names ------------------------------------------------------------------------------

    def _sqs_name(self, queue: str) -> str:
        """The SQS queue name behind a valid queue name; InvalidQueueArgumentError when the prefix makes it too long."""
        name = self.queue_prefix + queue
        if len(name) > MAX_SQS_NAME:
            raise InvalidQueueArgumentError(
                f"queue name {queue!r} is too long for QUEUE_PREFIX {self.queue_prefix!r}: "
                f"SQS names are at most {MAX_SQS_NAME} characters"
            )
        return name

    def queue_known(self, queue: str) -> bool:
        """Whether the SQS queue exists (GetQueueUrl); other errors propagate."""
        try:
            self._url(validate_queue_name(queue))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in NONEXISTENT_QUEUE_CODES:
                return False
            raise
        return True

    def _url(self, queue: str) -> str:
        """The queue's URL, from GetQueueUrl once per instance; no queue is ever created."""
        url = self._urls.get(queue)
        if url is None:
            name = self._sqs_name(queue)
            try:
                url = str(self.client.get_queue_url(QueueName=name)["QueueUrl"])
            except ClientError as exc:
                exc.add_note(
                    f"SQS queue {name!r} (kinetis_queue connection {self.connection!r}); "
                    "kinetis_queue never creates queues"
                )
                raise
            self._urls[queue] = url
        return url


def decode_message(message: dict[str, Any], queue: str, handle: SqsHandle) -> QueuedJob:
    """A received message as a QueuedJob; anything out of shape is MalformedQueuedJobDataError."""
    body = decode_body(message.get("Body", ""))
    receive_count = _count(message.get("Attributes", {}).get("ApproximateReceiveCount"), "ApproximateReceiveCount")
    expect(receive_count, lambda v: v >= 1, "ApproximateReceiveCount is out of range")
    attributes = message.get("MessageAttributes", {})
    max_attempts = None
    if MAX_ATTEMPTS_ATTRIBUTE in attributes:
        max_attempts = _count(_attribute(attributes, MAX_ATTEMPTS_ATTRIBUTE, "Number"), MAX_ATTEMPTS_ATTRIBUTE)
    metadata: Any = {}
    if METADATA_ATTRIBUTE in attributes:
        metadata = decode_metadata(loads(_attribute(attributes, METADATA_ATTRIBUTE, "String")))
    envelope = envelope_from_body(body, receive_count - 1, max_attempts, metadata)
    return QueuedJob.delivered(envelope, queue, handle)


def _attribute(attributes: Any, name: str, data_type: str) -> Any:
    value = attributes[name]
    expect(
        value,
        lambda v: type(v) is dict and v.get("DataType") == data_type and "StringValue" in v,
        f"message attribute {name} is not of type {data_type}",
    )
    return value["StringValue"]


def _count(value: Any, what: str) -> int:
    """A count stored as canonical decimal text, 0 to MAX_COUNTER."""
    if type(value) is not str or COUNT.fullmatch(value) is None or int(value) > MAX_COUNTER:
        raise MalformedQueuedJobDataError(f"stored job data is malformed: {what} is missing or out of range")
    return int(value)


def _handle(job: QueuedJob) -> SqsHandle:
    if not isinstance(job.handle, SqsHandle):
        raise InvalidQueueArgumentError("this QueuedJob was not delivered by an SQS queue")
    return job.handle


def _status(exc: ClientError) -> int:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return status if type(status) is int else 0
