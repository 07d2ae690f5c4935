"""SqsQueue: jobs as Amazon SQS messages, sent and received through boto3 (contract: "Backend mechanisms: SQS")."""

from __future__ import annotations

import hashlib
import math
import re
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, NamedTuple, Self

import boto3
import botocore.loaders
import botocore.session
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectTimeoutError, EndpointConnectionError, HTTPClientError
from botocore.exceptions import ConnectionError as BotocoreConnectionError

from kinetis_queue.backends.sqs.options import (
    FIFO_SUFFIX,
    MAX_DELAY,
    MAX_SQS_NAME,
    MAX_VISIBILITY_TIMEOUT,
    MESSAGE_GROUPS,
    OPTIONS,
    QUEUE_PREFIX_RULE,
    is_queue_prefix,
)
from kinetis_queue.conf import ConnectionSettings
from kinetis_queue.contracts import (
    DisposableQueue,
    JobSettlement,
    PreparedPush,
    QueuedJob,
    QueueStats,
    RenewableQueue,
    Reserved,
    StoreRefusal,
)
from kinetis_queue.exceptions import (
    ConnectionFailedError,
    InvalidQueueArgumentError,
    MalformedJobSettledError,
    MalformedQueuedJobDataError,
    OutcomeUnknownError,
    QueueConfigurationError,
    StaleJobHandleError,
)
from kinetis_queue.payload.envelope import (
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
from kinetis_queue.validation import MAX_COUNTER, validate_queue_list, validate_queue_name, validate_timeout

#: The largest message SQS accepts, body and message attributes together (1 MiB since August 2025).
MAX_MESSAGE_BYTES = 1_048_576
#: The longest long poll between two sweeps (contract: "The pop() priority/timeout contract").
LONG_POLL = 5
#: Seconds to open a connection, and to wait for a reply (a long poll answers within LONG_POLL).
CONNECT_TIMEOUT = 5
READ_TIMEOUT = 20
#: Connections each client keeps open for reuse. Every thread of a worker (``--concurrency`` job
#: threads, the heartbeat, the reserving loop's long poll) may call at once; botocore keeps 10 by
#: default, and urllib3 discards, with a warning each time, every connection opened beyond that.
MAX_POOL_CONNECTIONS = 64
#: The most entries one SendMessageBatch, DeleteMessageBatch or ReceiveMessage takes.
BATCH = 10
#: The error codes GetQueueUrl answers for a queue that does not exist (query and JSON protocols).
NONEXISTENT_QUEUE_CODES = frozenset(("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist"))
#: The codes SQS answers for an entry (or a call of one entry) that it refuses for good: the message is
#: invalid, too long for the queue (MaximumMessageSize), or names a parameter the queue does not take.
DEFINITIVE_ENTRY_CODES = frozenset(
    (
        "InvalidParameterValue",
        "InvalidMessageContents",
        "MessageTooLong",
        "BatchRequestTooLong",
        "InvalidAttributeName",
        "InvalidAttributeValue",
        "AWS.SimpleQueueService.UnsupportedOperation",
        "UnsupportedOperation",
    )
)
#: The codes SQS answers for a receipt handle it no longer honours: not a handle it issued, expired,
#: or (ChangeMessageVisibility) a message no longer in flight. InvalidParameterValue is also one when
#: its message names the ReceiptHandle parameter (AWS's answer for an expired handle).
STALE_RECEIPT_CODES = frozenset(
    ("ReceiptHandleIsInvalid", "AWS.SimpleQueueService.MessageNotInflight", "MessageNotInflight")
)
#: The message attributes this backend writes; at most three of SQS's ten.
MAX_ATTEMPTS_ATTRIBUTE = "maxAttempts"
METADATA_ATTRIBUTE = "metadata"
#: Attempts completed before the message was sent again by unreserve(); absent on a pushed message.
ATTEMPTS_ATTRIBUTE = "attempts"
#: FIFO only: a delayed message's delay in whole seconds, counted from its SentTimestamp (FIFO queues
#: refuse a per-message DelaySeconds; see SqsQueue's docstring).
DELAY_ATTRIBUTE = "delay"
#: What the attempts attribute can add to a message: name, type and a count of up to ten digits, and on a
#: FIFO queue the delay attribute (three digits). The size check of every push leaves this room, so a job
#: can always be sent again by unreserve().
ATTEMPTS_ROOM = len(ATTEMPTS_ATTRIBUTE) + len("Number") + 10
DELAY_ROOM = len(DELAY_ATTRIBUTE) + len("Number") + len(str(MAX_DELAY))
#: Hex digits of the message digest in a FIFO MessageDeduplicationId (after the job id and a "-").
DIGEST_LENGTH = 32
#: A stored count in canonical decimal form.
COUNT = re.compile(r"0|[1-9][0-9]{0,9}")


class SqsHandle(NamedTuple):
    """The delivery receipt: the queue's URL and the ReceiptHandle this receive returned."""

    queue_url: str
    receipt_handle: str


_loader: botocore.loaders.Loader | None = None
_loader_lock = threading.Lock()


def new_session() -> boto3.session.Session:
    """A boto3 Session of its own (a Session is not thread-safe; a client is) on the process's one data loader.

    botocore reads its service models and endpoint tables (JSON, about a megabyte) into a loader per session:
    a session of its own per client cost each SqsQueue two of those reads, about 200 ms of CPU per client. The
    loader only reads and caches, so every session of the process shares one, and a client costs about 30 ms.
    """
    global _loader
    with _loader_lock:
        if _loader is None:
            _loader = botocore.loaders.create_loader()
        loader = _loader
    core = botocore.session.Session()
    core.register_component("data_loader", loader)
    return boto3.session.Session(botocore_session=core)


class SqsQueue(RenewableQueue, DisposableQueue):
    """Jobs as messages on existing SQS queues: standard ones, or FIFO ones with FIFO set.

    Message: the body is ASCII-escaped JSON holding ``id``, ``pushedAt``, ``class`` and ``args``, so
    SQS's character rules can never alter it; ``maxAttempts`` is a Number attribute when set, and
    non-empty metadata one JSON String attribute. The attempt number is SQS's ApproximateReceiveCount,
    plus the ``attempts`` Number attribute a copy sent by unreserve() carries.
    Reservation: each receive hides the message for VISIBILITY_TIMEOUT seconds, best-effort: SQS may
    deliver it again within that window (contract: "At-least-once delivery"). pop() and pop_many()
    receive up to ten messages a call, each one a delivery the caller holds (and its heartbeat renews).
    Fence: none. ack/fail delete, release/renew change the visibility of the ReceiptHandle, and SQS
    answers a stale handle itself: its error propagates, or it accepts and nothing reports the lost
    delivery, so a handler must be idempotent (contract: "Delivery receipts and stale settlements").
    ack_many() and unreserve() report the receipts SQS refuses as StaleJobHandleError instead, since a
    batch cannot raise for one entry and a copy must not be sent for a delivery no longer held.
    Queues: a name (QUEUE_PREFIX + queue) resolves through GetQueueUrl once per instance; no queue is
    ever created. size() is ApproximateNumberOfMessages + ApproximateNumberOfMessagesDelayed, which
    leaves out in-flight messages, a delayed release() included. Not a ClearableQueue: PurgeQueue also
    deletes in-flight messages, reports no count and runs once a minute (contract, "SQS").

    Retries: SendMessage and SendMessageBatch are sent once. botocore's retries would repeat a request
    whose reply was lost, and SQS standard queues have no deduplication, so a retry could store a
    second copy. A failure before the request left raises ConnectionFailedError (nothing was stored);
    a lost reply or a 5xx raises OutcomeUnknownError (the message may be stored); a 4xx refusal
    propagates as botocore's ClientError. Every other call uses botocore's "standard" retry mode,
    since repeating it cannot duplicate a job. Both clients are thread-safe and shared by every
    thread of the worker (job threads, heartbeat, reserving loop), with a connection pool sized for
    them (MAX_POOL_CONNECTIONS); they are built once on first use, under a lock, with boto3's
    credential chain, and closed by dispose().

    FIFO (docs/backends/sqs.md, "FIFO queues"): every SQS name gets the ``.fifo`` suffix. Each message
    carries a MessageDeduplicationId, ``{job id}-{digest}`` (the digest of its body and attributes),
    so a send repeated after a lost reply (``send()`` of the same PreparedPush) is stored once within
    SQS's five-minute window, while a different message under the same id (a debounce replacement, an
    unreserve() copy, which also mixes the receipt into the digest) is not mistaken for it. The
    MessageGroupId is that same id (MESSAGE_GROUP "message": no order, no group ever blocks another
    message) or the queue's name ("queue": delivered in push order, and no receive gets any of the
    queue's messages while one is in flight, though one receive may take up to ten in order). FIFO
    refuses a per-message DelaySeconds, so a delay travels as the ``delay`` attribute: a message
    received before SentTimestamp + delay is hidden (ChangeMessageVisibility) for the rest of its
    delay and not handed out, and the attempt count leaves out that early receive.
    """

    backend_name = "sqs"
    settings_schema = OPTIONS
    #: Ten SendMessageBatch calls, each a round trip that the relay awaits in turn: a relay killed mid-batch
    #: sends at most this many again.
    relay_batch = 100

    def __init__(
        self,
        *,
        region: str | None = None,
        endpoint_url: str | None = None,
        queue_prefix: str = "",
        visibility_timeout: int = 300,
        connection: str | None = None,
        fifo: bool = False,
        message_group: str = "message",
    ) -> None:
        super().__init__(connection=connection)
        # Validated before any client exists (contract: QUEUE_VISIBILITY_TIMEOUT_SECONDS, 1 to MAX_VISIBILITY_TIMEOUT).
        if type(visibility_timeout) is not int or not 1 <= visibility_timeout <= MAX_VISIBILITY_TIMEOUT:
            raise QueueConfigurationError(f"visibility_timeout must be an int from 1 to {MAX_VISIBILITY_TIMEOUT}")
        if not is_queue_prefix(queue_prefix):
            raise QueueConfigurationError(f"queue_prefix {QUEUE_PREFIX_RULE}")
        if type(fifo) is not bool:
            raise QueueConfigurationError("fifo must be True or False")
        if type(message_group) is not str or message_group not in MESSAGE_GROUPS:
            raise QueueConfigurationError(
                f"message_group must be one of {', '.join(repr(name) for name in MESSAGE_GROUPS)}"
            )
        #: Whether the queues are FIFO queues (their SQS names end in ``.fifo``).
        self.fifo = fifo
        #: A FIFO message's MessageGroupId: its deduplication id ("message") or its queue's name ("queue").
        self.message_group = message_group
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
            fifo=settings.options["FIFO"],
            message_group=settings.options["MESSAGE_GROUP"],
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
            max_pool_connections=MAX_POOL_CONNECTIONS,
            retries={"mode": "standard", "total_max_attempts": attempts},
        )
        return new_session().client("sqs", region_name=self.region, endpoint_url=self.endpoint_url, config=config)

    def dispose(self) -> None:
        with self._clients_lock:
            clients, self._clients = self._clients, None
        for client in clients or ():
            client.close()

    # -- push -------------------------------------------------------------------------------------

    def _check_push(self, prepared: PreparedPush) -> None:
        """SQS's own limits (name length, delay cap, message size), checked by prepare() before any I/O."""
        self._sqs_name(prepared.queue)
        self._message(prepared.envelope, prepared.delay, prepared.queue)

    def _message(self, envelope: Envelope, delay: float, queue: str, salt: str = "") -> dict[str, Any]:
        """SendMessage's arguments, less the queue URL; rejects what SQS would refuse.

        ``envelope.attempts`` above 0 (a copy sent by unreserve()) travels as the attempts attribute;
        the size check always leaves room for it (ATTEMPTS_ROOM). On a FIFO queue: the delay as the
        delay attribute, and the deduplication and group ids (``salt``: what sets an unreserve()
        copy apart from the message it replaces, whose body and attributes it may repeat).
        """
        if delay > MAX_DELAY:
            raise InvalidQueueArgumentError(f"delay must be at most {MAX_DELAY} seconds on SQS")
        body = encode_body(envelope)
        attributes: dict[str, dict[str, str]] = {}
        if envelope.attempts:
            attributes[ATTEMPTS_ATTRIBUTE] = {"DataType": "Number", "StringValue": str(envelope.attempts)}
        if envelope.max_attempts is not None:
            attributes[MAX_ATTEMPTS_ATTRIBUTE] = {"DataType": "Number", "StringValue": str(envelope.max_attempts)}
        if envelope.metadata:
            attributes[METADATA_ATTRIBUTE] = {"DataType": "String", "StringValue": dumps(envelope.metadata)}
        message: dict[str, Any] = {"MessageBody": body}
        if not self.fifo:
            message["DelaySeconds"] = math.ceil(delay)
        elif delay > 0:
            attributes[DELAY_ATTRIBUTE] = {"DataType": "Number", "StringValue": str(math.ceil(delay))}
        if attributes:
            message["MessageAttributes"] = attributes
        room = (0 if envelope.attempts else ATTEMPTS_ROOM) + (DELAY_ROOM if self.fifo and delay <= 0 else 0)
        size = _message_bytes(message) + room
        if size > MAX_MESSAGE_BYTES:
            raise InvalidQueueArgumentError(
                f"the job's SQS message would be {size} bytes; SQS accepts at most {MAX_MESSAGE_BYTES}"
            )
        if self.fifo:
            dedup = f"{envelope.id}-{_digest(message, salt)}"
            message["MessageDeduplicationId"] = dedup
            message["MessageGroupId"] = queue if self.message_group == "queue" else dedup
        return message

    def _push(self, envelope: Envelope, delay: float, queue: str) -> None:
        message = self._message(envelope, delay, queue)
        self._send(self._lookup(queue), message)

    def _lookup(self, queue: str) -> str:
        """The queue's URL for a push: a failed lookup (GetQueueUrl, retried) means nothing was sent."""
        try:
            return self._url(queue)
        except (HTTPClientError, BotocoreConnectionError) as exc:
            raise ConnectionFailedError(
                f"SendMessage was not sent: the queue's URL lookup failed; the job was not stored: {exc}"
            ) from exc

    def _push_many(self, prepared: Sequence[PreparedPush]) -> None:
        """SendMessageBatch per queue, up to ten messages and MAX_MESSAGE_BYTES a call, each call sent once.

        Every message is built and every queue looked up before the first batch goes, so a refusal
        there stores nothing. Then the batches go out in order. What a failure leaves stored:

        - A call that fails stops the push there, raised as push() raises it (ConnectionFailedError:
          that batch was not stored; OutcomeUnknownError: it may have been; ClientError: SQS refused
          the whole call), its message naming the batch's first job (``jobs[i]: ``). Every earlier
          batch was sent (a note lists any job SQS refused in them), no later one was.
        - Entries SQS refuses one by one do not stop the push: every batch is sent, then a ClientError
          names the first refused job (``jobs[i]: ``) with SQS's code, and a note lists every refused
          index. A refused entry was not stored; every other job was.
        """
        messages = [self._message(item.envelope, item.delay, item.queue) for item in prepared]
        urls = {item.queue: "" for item in prepared}
        for queue in urls:
            urls[queue] = self._lookup(queue)
        stored = 0
        refused: list[tuple[int, dict[str, Any]]] = []
        for url, batch in _send_batches([urls[item.queue] for item in prepared], messages):
            entries = [{"Id": str(index), **messages[index]} for index in batch]
            try:
                response = self._send_batch(url, entries, batch, stored)
            except Exception as exc:
                if refused:
                    exc.add_note(
                        "SQS had refused these jobs of earlier batches, which were not stored: "
                        + ", ".join(f"jobs[{i}]" for i, _ in sorted(refused, key=lambda failure: failure[0]))
                    )
                raise
            stored += len(batch)
            refused += [(int(entry["Id"]), entry) for entry in response.get("Failed") or ()]
        if refused:
            refused.sort(key=lambda failure: failure[0])
            index, entry = refused[0]
            status = 400 if entry.get("SenderFault", True) else 500
            error = ClientError(
                {
                    "Error": {"Code": entry.get("Code", ""), "Message": entry.get("Message", "")},
                    "ResponseMetadata": {"HTTPStatusCode": status},
                },
                "SendMessageBatch",
            )
            error.args = (f"jobs[{index}]: {error}",)
            error.add_note(
                "SQS refused these jobs of the batch, which were not stored (every other job was): "
                + ", ".join(f"jobs[{i}]" for i, _ in refused)
            )
            raise error

    def store_many(self, prepared: Sequence[PreparedPush]) -> list[StoreRefusal]:
        """The outbox relay's send: SendMessageBatch per queue as ``_push_many``, each push's outcome its own.

        Nothing raises once sending began: a call that fails leaves its pushes and every later call's
        refused for now (a transport error, an unknown outcome, a throttle: sent again), so the
        batches SQS took are never sent twice. Refused for good (``final``): a queue that does not
        exist, a message SQS's own limits or the queue's (MaximumMessageSize) refuse, an entry SQS
        rejects as invalid. A whole call refused for one entry (SQS answers an oversized entry so) is
        sent again entry by entry, so that only that entry is refused.
        """
        refusals: list[StoreRefusal] = []
        urls: dict[str, str | BaseException] = {}
        for item in prepared:
            if item.queue not in urls:
                try:
                    urls[item.queue] = self._lookup(item.queue)
                except ClientError as exc:
                    if not _codes(exc) & NONEXISTENT_QUEUE_CODES:
                        raise  # nothing was sent yet: the relay sends them all again
                    urls[item.queue] = exc
        messages: dict[int, dict[str, Any]] = {}
        for index, item in enumerate(prepared):
            url = urls[item.queue]
            if isinstance(url, BaseException):
                refusals.append(StoreRefusal(index, url, final=True))
                continue
            try:
                messages[index] = self._message(item.envelope, item.delay, item.queue)
            except InvalidQueueArgumentError as exc:
                refusals.append(StoreRefusal(index, exc, final=True))
        order = sorted(messages)
        calls = deque(
            [order[i] for i in batch]
            for _, batch in _send_batches([str(urls[prepared[i].queue]) for i in order], [messages[i] for i in order])
        )
        while calls:
            batch = calls.popleft()
            url = str(urls[prepared[batch[0]].queue])
            entries = [{"Id": str(index), **messages[index]} for index in batch]
            where = f"SendMessageBatch of {len(batch)} job(s) to queue {prepared[batch[0]].queue!r}"
            try:
                response = self._call_batch(url, entries, where)
            except ClientError as exc:
                codes = _codes(exc)
                if codes & DEFINITIVE_ENTRY_CODES and len(batch) > 1:
                    calls.extendleft([index] for index in reversed(batch))  # find the entry SQS refuses
                    continue
                final = bool(codes & (DEFINITIVE_ENTRY_CODES | NONEXISTENT_QUEUE_CODES))
                refusals += [StoreRefusal(index, exc, final) for index in batch]
                continue
            except (ConnectionFailedError, OutcomeUnknownError) as exc:
                refusals += [StoreRefusal(index, exc, final=False) for index in batch]
                refusals += [StoreRefusal(index, exc, final=False) for later in calls for index in later]
                break
            for entry in response.get("Failed") or ():
                error = ClientError(
                    {"Error": {"Code": entry.get("Code", ""), "Message": entry.get("Message", "")}}, "SendMessageBatch"
                )
                final = bool(entry.get("SenderFault", True)) and entry.get("Code") in DEFINITIVE_ENTRY_CODES
                refusals.append(StoreRefusal(int(entry["Id"]), error, final))
        return refusals

    def _send_batch(self, url: str, entries: list[dict[str, Any]], batch: list[int], stored: int) -> Any:
        """One SendMessageBatch, sent once; a failed call raised as push() raises it, naming its first job."""
        where = (
            f"jobs[{batch[0]}]: SendMessageBatch of {len(batch)} jobs from jobs[{batch[0]}] "
            f"(the {stored} jobs of earlier batches were sent, no later batch was)"
        )
        return self._call_batch(url, entries, where)

    def _call_batch(self, url: str, entries: list[dict[str, Any]], where: str) -> Any:
        """SendMessageBatch, sent once: ConnectionFailedError (not stored), OutcomeUnknownError (no reply, or
        SQS failed: maybe stored), or SQS's refusal of the whole call (ClientError, not stored), ``where`` first."""
        try:
            return self.send_client.send_message_batch(QueueUrl=url, Entries=entries)
        except (EndpointConnectionError, ConnectTimeoutError) as exc:
            raise ConnectionFailedError(f"{where} never reached SQS; those jobs were not stored: {exc}") from exc
        except (HTTPClientError, BotocoreConnectionError) as exc:
            raise OutcomeUnknownError(f"{where} got no reply; those jobs may have been stored: {exc}") from exc
        except ClientError as exc:
            if _status(exc) >= 500:
                raise OutcomeUnknownError(f"{where} failed in SQS; those jobs may have been stored: {exc}") from exc
            exc.args = (f"{where} was refused; those jobs were not stored: {exc}",)
            raise

    def _send(self, url: str, message: dict[str, Any]) -> None:
        """One SendMessage, sent once, its failures mapped as push() documents."""
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
        """The contract's pop(): ``_reserve()`` with a limit of one; a malformed message is raised."""
        reserved = self._reserve(timeout, queues, 1)
        if reserved.malformed:
            raise reserved.malformed[0]
        return reserved.jobs[0] if reserved.jobs else None

    def pop_many(self, timeout: float, queues: Sequence[str], limit: int) -> Reserved:
        """The contract's pop_many(): ``_reserve()``, up to ten messages per ReceiveMessage."""
        if type(limit) is not int or limit < 1:
            raise InvalidQueueArgumentError("limit must be an int of 1 or more")
        return self._reserve(timeout, queues, limit)

    def _reserve(self, timeout: float, queues: Sequence[str], limit: int) -> Reserved:
        """Sweep every queue with WaitTimeSeconds 0, then long-poll the first for up to 5 s, until the deadline.

        Contract, "The pop() priority/timeout contract": the long poll reserves what it finds, so it is
        this loop's wait as well as a probe. It lasts whole seconds, so it can outlast the deadline by
        up to a second; the deadline is checked again as soon as it returns empty. pop() and
        pop_many() share this loop rather than the contract's ``_wait()`` hook: that hook waits
        without reserving and at most a second (``poll_pause``), where SQS's wait is a receive that
        returns messages and lasts up to LONG_POLL.
        """
        seconds = validate_timeout(timeout)
        names = validate_queue_list(queues)
        for name in names:
            self._sqs_name(name)
        if not names:
            return Reserved()
        deadline = None if seconds == 0 else time.monotonic() + seconds
        while True:
            found = self._sweep_many(names, limit)
            if found:
                return found
            wait = LONG_POLL
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return found
                wait = min(LONG_POLL, math.ceil(left))
            self._receive(names[0], wait, limit, found)
            if found or (deadline is not None and time.monotonic() >= deadline):
                return found

    def _sweep(self, queues: tuple[str, ...]) -> QueuedJob | None:  # pragma: no cover - required by Queue
        # (abstract); this backend's pop() and pop_many() reserve through _reserve(), never through it.
        reserved = self._sweep_many(queues, 1)
        if reserved.malformed:
            raise reserved.malformed[0]
        return reserved.jobs[0] if reserved.jobs else None

    def _sweep_many(self, queues: tuple[str, ...], limit: int) -> Reserved:
        """One ReceiveMessage (WaitTimeSeconds 0) per queue in priority order, until ``limit`` messages came.

        Each asks for what is still missing, at most ten; a queue is asked once per sweep, so a limit
        above ten fills from the next queues or the next sweep. Every message received is in the
        result, as a delivery or as a removed malformed message: none is held unseen.
        """
        reserved = Reserved()
        for name in queues:
            missing = limit - len(reserved.jobs) - len(reserved.malformed)
            if missing <= 0:
                break
            self._receive(name, 0, missing, reserved)
        return reserved

    def _receive(self, queue: str, wait: int, limit: int, into: Reserved) -> None:
        """ReceiveMessage of up to ``min(limit, 10)`` messages into ``into``, malformed ones deleted.

        A malformed message is deleted alone (DeleteMessage) and reported in ``into.malformed``; a
        failing deletion propagates, and the deliveries of the same receive come back when their
        visibility timeout ends.
        """
        url = self._url(queue)
        system = ["ApproximateReceiveCount"]
        names = [ATTEMPTS_ATTRIBUTE, MAX_ATTEMPTS_ATTRIBUTE, METADATA_ATTRIBUTE]
        if self.fifo:
            system += ["SentTimestamp", "ApproximateFirstReceiveTimestamp"]
            names.append(DELAY_ATTRIBUTE)
        response = self.client.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=min(limit, BATCH),
            WaitTimeSeconds=wait,
            # Overrides the queue's own attribute for the messages this application takes.
            VisibilityTimeout=self._visibility_timeout,
            MessageSystemAttributeNames=system,
            MessageAttributeNames=names,
        )
        for message in response.get("Messages") or ():
            if self.fifo and self._hidden_until_due(message, url):
                continue
            try:
                into.jobs.append(self._delivered(message, queue, url))
            except MalformedJobSettledError as exc:
                into.malformed.append(exc)

    def _hidden_until_due(self, message: dict[str, Any], url: str) -> bool:
        """FIFO: whether the message is early (before SentTimestamp + its delay attribute, by this
        machine's clock), in which case it is hidden for the rest of its delay and not handed out.

        A message whose delay attribute or timestamp does not decode is not early: decode_message
        reports it as malformed. A receipt SQS no longer honours (another receive took it) is left alone.
        """
        due = _due(message)
        if due is None:
            return False
        left = due - time.time()
        if left <= 0:
            return False
        try:
            self.client.change_message_visibility(
                QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=min(MAX_DELAY, math.ceil(left))
            )
        except ClientError as exc:
            if not _stale(exc.response.get("Error", {})):
                raise
        return True

    def _delivered(self, message: dict[str, Any], queue: str, url: str) -> QueuedJob:
        """One received message as a delivery; a malformed one is deleted and MalformedJobSettledError raised."""
        handle = SqsHandle(url, message["ReceiptHandle"])
        return settle_if_malformed(
            lambda: decode_message(message, queue, handle),
            lambda: self.client.delete_message(QueueUrl=url, ReceiptHandle=handle.receipt_handle),
        )

    # -- settlements and renewal ------------------------------------------------------------------

    def ack(self, job: QueuedJob) -> None:
        handle = _handle(job)
        self.client.delete_message(QueueUrl=handle.queue_url, ReceiptHandle=handle.receipt_handle)

    def _ack_many(self, jobs: Sequence[QueuedJob]) -> list[StaleJobHandleError | None]:
        """DeleteMessageBatch per queue, ten receipts a call; each entry answered on its own.

        An entry SQS refuses for its receipt (expired, not issued, message gone: ``_stale``) is
        reported as StaleJobHandleError(ACK) in its place; the message was not deleted by this call.
        An entry refused for any other reason is deleted again alone with DeleteMessage once every
        batch has gone, so its error propagates exactly as ack()'s would. A failed call propagates
        like DeleteMessage's (botocore's standard retries first), the batches before it applied.
        SQS refuses one receipt twice in a call, so a repeated delivery goes into a later batch and
        gets SQS's own answer there.
        """
        handles = [_handle(job) for job in jobs]  # every handle checked before any call
        results: list[StaleJobHandleError | None] = [None] * len(jobs)
        again: list[int] = []
        for url, batch in _batches(handles):
            response = self.client.delete_message_batch(
                QueueUrl=url,
                Entries=[{"Id": str(index), "ReceiptHandle": handles[index].receipt_handle} for index in batch],
            )
            for failed in response.get("Failed") or ():
                index = int(failed["Id"])
                if _stale(failed):
                    results[index] = StaleJobHandleError(JobSettlement.ACK)
                else:
                    again.append(index)
        for index in again:
            handle = handles[index]
            try:
                self.client.delete_message(QueueUrl=handle.queue_url, ReceiptHandle=handle.receipt_handle)
            except ClientError as exc:
                if not _stale(exc.response.get("Error", {})):
                    raise
                results[index] = StaleJobHandleError(JobSettlement.ACK)
        return results

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

    def _unreserve(self, job: QueuedJob, delay: float) -> None:
        """Send the job again as a new message carrying its completed attempts, then delete the delivered one.

        SQS counts every receive (ApproximateReceiveCount, the attempt number) and no call lowers it,
        so ChangeMessageVisibility(0) would charge the attempt that never started. Three calls instead:
        ChangeMessageVisibility for a full window (the fence: a receipt SQS no longer honours raises
        StaleJobHandleError(UNRESERVE) with nothing written; and the message stays hidden meanwhile),
        SendMessage of the same id, class, args, pushedAt, cap and metadata with the attempts
        attribute (job.attempts - 1), then DeleteMessage of the delivered message. The copy is
        visible at once, or after ``delay`` (its DelaySeconds, whole seconds rounded up, at most 900);
        a standard queue keeps no order, so it is not ahead of waiting jobs. A
        SendMessage failure raises as push() does, the delivery still held; a DeleteMessage failure
        propagates after the copy was stored, and the old message comes back once its window ends
        (one duplicate delivery, as at-least-once allows).
        """
        handle = _handle(job)
        try:
            self.client.change_message_visibility(
                QueueUrl=handle.queue_url,
                ReceiptHandle=handle.receipt_handle,
                VisibilityTimeout=self._visibility_timeout,
            )
        except ClientError as exc:
            if _stale(exc.response.get("Error", {})):
                raise StaleJobHandleError(JobSettlement.UNRESERVE) from exc
            raise
        envelope = Envelope(
            job.id,
            job.pushed_at.timestamp(),
            job.job_class,
            job.args,
            job.attempts - 1,
            job.max_attempts,
            job.metadata,
        )
        # On a FIFO queue the copy may repeat the delivered message's body and attributes (no attempt
        # completed, no delay): the receipt, which no other message has, sets its deduplication id apart.
        self._send(handle.queue_url, self._message(envelope, delay, job.queue, salt=handle.receipt_handle))
        try:
            self.client.delete_message(QueueUrl=handle.queue_url, ReceiptHandle=handle.receipt_handle)
        except Exception as exc:
            exc.add_note(
                "unreserve() had already stored the job again; the delivered message comes back when its "
                "visibility timeout ends (a duplicate delivery)"
            )
            raise

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
        name = self.queue_prefix + queue + (FIFO_SUFFIX if self.fifo else "")
        if len(name) > MAX_SQS_NAME:
            suffix = f" and the {FIFO_SUFFIX!r} suffix of a FIFO queue" if self.fifo else ""
            raise InvalidQueueArgumentError(
                f"queue name {queue!r} is too long for QUEUE_PREFIX {self.queue_prefix!r}{suffix}: "
                f"SQS names are at most {MAX_SQS_NAME} characters"
            )
        return name

    def sqs_name(self, queue: str) -> str:
        """The name of the SQS queue behind ``queue``: QUEUE_PREFIX + queue (+ ``.fifo`` with FIFO)."""
        return self._sqs_name(validate_queue_name(queue))

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
    carried = 0
    if ATTEMPTS_ATTRIBUTE in attributes:
        carried = _count(_attribute(attributes, ATTEMPTS_ATTRIBUTE, "Number"), ATTEMPTS_ATTRIBUTE)
    max_attempts = None
    if MAX_ATTEMPTS_ATTRIBUTE in attributes:
        max_attempts = _count(_attribute(attributes, MAX_ATTEMPTS_ATTRIBUTE, "Number"), MAX_ATTEMPTS_ATTRIBUTE)
    metadata: Any = {}
    if METADATA_ATTRIBUTE in attributes:
        metadata = decode_metadata(loads(_attribute(attributes, METADATA_ATTRIBUTE, "String")))
    if DELAY_ATTRIBUTE in attributes:
        receive_count -= _early_receives(message, receive_count)
    # Attempts completed: those carried by a copy unreserve() sent, plus this message's earlier receives.
    envelope = envelope_from_body(body, carried + receive_count - 1, max_attempts, metadata)
    return QueuedJob.delivered(envelope, queue, handle)


def _due(message: dict[str, Any]) -> float | None:
    """A FIFO message's due time (epoch seconds): SentTimestamp + its delay attribute; None if it has none
    or either does not decode (decode_message then reports the message as malformed)."""
    delay = message.get("MessageAttributes", {}).get(DELAY_ATTRIBUTE)
    sent = message.get("Attributes", {}).get("SentTimestamp")
    if type(delay) is not dict or delay.get("DataType") != "Number" or type(sent) is not str:
        return None
    text = delay.get("StringValue")
    if type(text) is not str or COUNT.fullmatch(text) is None or not sent.isdigit():
        return None
    return int(sent) / 1000 + int(text)


def _early_receives(message: dict[str, Any], receive_count: int) -> int:
    """1 when this FIFO message was received before it was due (and hidden until then), else 0.

    The first receive's time and the due time are both SQS's clock. Only one early receive is left out:
    a worker that died between an early receive and hiding the message costs its job an attempt, as a
    worker that dies after any receive does.
    """
    due = _due(message)
    if due is None:
        _attribute(message.get("MessageAttributes", {}), DELAY_ATTRIBUTE, "Number")
        raise MalformedQueuedJobDataError("stored job data is malformed: delay or SentTimestamp is out of range")
    first = message.get("Attributes", {}).get("ApproximateFirstReceiveTimestamp")
    if receive_count > 1 and type(first) is str and first.isdigit() and int(first) / 1000 < due:
        return 1
    return 0


def _digest(message: dict[str, Any], salt: str) -> str:
    """A FIFO deduplication digest: the body, the attributes (sorted) and ``salt``, hashed."""
    hasher = hashlib.sha256(message["MessageBody"].encode())
    for name, value in sorted(message.get("MessageAttributes", {}).items()):
        hasher.update(f"\0{name}\0{value['DataType']}\0{value['StringValue']}".encode())
    hasher.update(b"\0" + salt.encode())
    return hasher.hexdigest()[:DIGEST_LENGTH]


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


def _message_bytes(message: dict[str, Any]) -> int:
    """A message's size as SQS counts it: body plus each attribute's name, type and value.

    dumps() writes ASCII only, so characters are bytes here.
    """
    attributes = message.get("MessageAttributes", {})
    return len(message["MessageBody"]) + sum(
        len(name) + len(value["DataType"]) + len(value["StringValue"]) for name, value in attributes.items()
    )


def _send_batches(urls: Sequence[str], messages: Sequence[dict[str, Any]]) -> list[tuple[str, list[int]]]:
    """The indexes of ``messages`` (bound for ``urls``) as SendMessageBatch calls, in the order each was
    opened: one open batch per queue, closed at BATCH messages or before passing MAX_MESSAGE_BYTES
    (SQS's limit on a batch's total); the indexes of one batch keep their order."""
    batches: list[tuple[str, list[int]]] = []
    open_batch: dict[str, tuple[list[int], list[int]]] = {}  # url -> (indexes, [bytes])
    for index, (url, message) in enumerate(zip(urls, messages, strict=True)):
        size = _message_bytes(message)
        current = open_batch.get(url)
        if current is None or len(current[0]) == BATCH or current[1][0] + size > MAX_MESSAGE_BYTES:
            current = open_batch[url] = ([], [0])
            batches.append((url, current[0]))
        current[0].append(index)
        current[1][0] += size
    return batches


def _batches(handles: Sequence[SqsHandle]) -> list[tuple[str, list[int]]]:
    """The indexes of ``handles`` as DeleteMessageBatch calls, in the order each was opened: per queue, at
    most BATCH entries each and no receipt twice in one call (a repeat goes to a later batch)."""
    batches: list[tuple[str, list[int]]] = []
    open_batches: dict[str, list[tuple[list[int], set[str]]]] = {}
    for index, handle in enumerate(handles):
        candidates = open_batches.setdefault(handle.queue_url, [])
        for indexes, receipts in candidates:
            if len(indexes) < BATCH and handle.receipt_handle not in receipts:
                indexes.append(index)
                receipts.add(handle.receipt_handle)
                break
        else:
            indexes = [index]
            candidates.append((indexes, {handle.receipt_handle}))
            batches.append((handle.queue_url, indexes))
    return batches


def _stale(error: Any) -> bool:
    """Whether an error (a ClientError's ``Error``, or a batch's failed entry) says the receipt is stale."""
    code = error.get("Code", "")
    if code in STALE_RECEIPT_CODES:
        return True
    return code == "InvalidParameterValue" and "parameter ReceiptHandle is invalid" in str(error.get("Message", ""))


def _codes(exc: ClientError) -> frozenset[str]:
    """The error's codes: its Code and, on the JSON protocol, the query protocol's (QueryErrorCode)."""
    error = exc.response.get("Error", {})
    return frozenset(str(error[key]) for key in ("Code", "QueryErrorCode") if error.get(key))


def _status(exc: ClientError) -> int:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return status if type(status) is int else 0
