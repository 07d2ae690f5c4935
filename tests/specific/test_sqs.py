"""SQS backend: what the conformance suite cannot see (contract: "Backend mechanisms: SQS").

Every test talks to moto's server over HTTP. Calls are counted with botocore's own event hooks on
the backend's clients, which observe each request without changing it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from django.db import transaction
from django.test import override_settings

from kinetis_queue import connections, push_on_commit
from kinetis_queue.backends.sqs.queue import MAX_MESSAGE_BYTES, SqsHandle, SqsQueue, decode_message
from kinetis_queue.contracts import ClearableQueue, DisposableQueue, RenewableQueue
from kinetis_queue.exceptions import (
    InvalidQueueArgumentError,
    MalformedJobSettledError,
    MalformedQueuedJobDataError,
    QueueConfigurationError,
    QueueNotClearableError,
    StaleJobHandleError,
)
from kinetis_queue.worker import Worker
from tests import jobs
from tests.jobs import FailsOnce, Records, Sleeps
from tests.support.sqs_server import MotoServer, SqsTestQueues

ROOT = Path(__file__).resolve().parents[2]


class Calls:
    """Every request the backend's clients make, as (operation, parameters, thread name); ``at`` holds
    the monotonic time each was built, in the same order."""

    def __init__(self, queue: SqsQueue) -> None:
        self.seen: list[tuple[str, dict[str, Any], str]] = []
        self.at: list[float] = []
        for client in (queue.client, queue.send_client):
            client.meta.events.register("before-parameter-build.sqs", self._record)

    def _record(self, params: dict[str, Any], model: Any, **kwargs: Any) -> None:
        self.seen.append((model.name, dict(params), threading.current_thread().name))
        self.at.append(time.monotonic())

    def names(self) -> list[str]:
        return [name for name, _, _ in self.seen]

    def receives(self) -> list[tuple[str, int]]:
        """(queue name, WaitTimeSeconds) of each ReceiveMessage."""
        return [
            (params["QueueUrl"].rsplit("/", 1)[1], params["WaitTimeSeconds"])
            for name, params, _ in self.seen
            if name == "ReceiveMessage"
        ]

    def clear(self) -> None:
        self.seen.clear()
        self.at.clear()


@pytest.fixture
def sqs(sqs_queues: SqsTestQueues) -> Iterator[SqsQueue]:
    """The tests' sqs connection (VISIBILITY_TIMEOUT 1), creating this test's queues on first lookup."""
    queue = connections.build("sqs")
    assert isinstance(queue, SqsQueue)
    sqs_queues.prepare(queue)
    yield queue
    queue.dispose()


@pytest.fixture
def calls(sqs: SqsQueue) -> Calls:
    return Calls(sqs)


def _counts(admin: Any, url: str) -> dict[str, int]:
    attributes = admin.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    keys = ("Messages", "MessagesDelayed", "MessagesNotVisible")
    return {key: int(attributes[f"ApproximateNumberOf{key}"]) for key in keys}


# -- configuration ----------------------------------------------------------------------------------


def test_the_backend_declares_its_capabilities() -> None:
    """Contract: SQS renews (ChangeMessageVisibility), cannot clear, and owns its boto3 clients."""
    assert issubclass(SqsQueue, RenewableQueue)
    assert issubclass(SqsQueue, DisposableQueue)
    assert not issubclass(SqsQueue, ClearableQueue)


def test_every_client_of_the_process_reads_botocores_models_once() -> None:
    """Each client keeps a session of its own (a Session is not thread-safe), on the process's one data loader:
    a loader per session read botocore's JSON models again for every client, about 200 ms of CPU each."""
    first, second = connections.build("sqs"), connections.build("sqs")
    assert isinstance(first, SqsQueue) and isinstance(second, SqsQueue)
    try:
        clients = [first.client, first.send_client, second.client, second.send_client]
        assert len({id(client) for client in clients}) == 4
        assert all(client._loader is clients[0]._loader for client in clients)
    finally:
        first.dispose()
        second.dispose()


@pytest.mark.parametrize("value", [0, 43201, -1, True, 1.5, "300", None])
def test_visibility_timeout_is_validated_before_any_client_is_built(value: Any) -> None:
    """Contract: VISIBILITY_TIMEOUT admitted range 1 to 43200, validated before any client is built."""
    with pytest.raises(QueueConfigurationError, match="visibility_timeout"):
        SqsQueue(visibility_timeout=value)
    queue = SqsQueue(visibility_timeout=43200)
    assert queue.visibility_timeout() == 43200
    assert queue._clients is None  # building the queue built no client: that waits for the first call


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("VISIBILITY_TIMEOUT", 43201),
        ("REGION", 5),
        ("REGION", ""),
        ("ENDPOINT_URL", b"http://x"),
        ("QUEUE_PREFIX", "a.b"),
        ("QUEUE_PREFIX", "x" * 80),
        ("ACCESS_KEY_ID", "AKIA"),
        ("SECRET_ACCESS_KEY", "secret"),
    ],
)
def test_bad_settings_name_the_key(key: str, value: Any) -> None:
    """Bad settings fail at start-up naming the key; credentials are not settings (boto3's chain supplies them)."""
    setting = {"CONNECTIONS": {"aws": {"BACKEND": "sqs", "REGION": "eu-west-1", key: value}}}
    with override_settings(KINETIS_QUEUE={**setting, "DEFAULT_CONNECTION": "aws"}):
        with pytest.raises(QueueConfigurationError, match=rf"\['{key}'\]"):
            connections.build("aws")


# -- push -------------------------------------------------------------------------------------------


def test_a_push_is_one_ascii_json_body_and_at_most_two_attributes(
    sqs: SqsQueue, sqs_queues: SqsTestQueues, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contract, SQS: a JSON body holding class and args, maxAttempts as a numeric attribute when set, metadata
    as one JSON-encoded attribute. Written ASCII-escaped, so SQS's character rules cannot alter it."""
    monkeypatch.setattr(sqs, "_metadata", lambda: {"traceparent": "00-é-01"})
    text = 'héllo ✓ 🚀 \x00 "q" \\'
    job_id = sqs.push(Records(text, [1]), queue=queue_name, max_attempts=3)
    monkeypatch.setattr(sqs, "_metadata", dict)
    bare_id = sqs.push(Records("bare"), queue=queue_name)

    raw = sqs_queues.admin.receive_message(
        QueueUrl=sqs_queues.urls[queue_name],
        MaxNumberOfMessages=10,
        MessageAttributeNames=["All"],
        VisibilityTimeout=0,
    )["Messages"]

    by_id = {json.loads(m["Body"])["id"]: m for m in raw}
    full, bare = by_id[job_id], by_id[bare_id]
    assert full["Body"].isascii()
    body = json.loads(full["Body"])
    assert body.keys() == {"id", "pushedAt", "class", "args"}
    assert (body["class"], body["args"]["label"]) == ("tests.jobs.Records", text)
    assert full["MessageAttributes"] == {
        "maxAttempts": {"DataType": "Number", "StringValue": "3"},
        "metadata": {"DataType": "String", "StringValue": '{"traceparent":"00-\\u00e9-01"}'},
    }
    assert "MessageAttributes" not in bare  # no cap and no metadata: no attributes at all
    delivered = sqs.pop(5, [queue_name])
    assert delivered is not None
    assert (delivered.id, delivered.args["label"], delivered.max_attempts) == (job_id, text, 3)
    assert delivered.metadata == {"traceparent": "00-é-01"}
    sqs.ack(delivered)


@pytest.mark.parametrize("delay", [900.001, 901, 3600])
def test_a_delay_over_900_seconds_is_rejected_before_anything_is_sent(
    sqs: SqsQueue, calls: Calls, queue_name: str, delay: float
) -> None:
    """Contract: What push() guarantees (SQS adds a 900-second delay cap, raised before anything is sent)."""
    with pytest.raises(InvalidQueueArgumentError, match="at most 900"):
        sqs.push(Records("never"), delay=delay, queue=queue_name)

    assert calls.names() == []
    sqs.push(Records("longest"), delay=900, queue=queue_name)
    assert sqs.size(queue_name) == 1  # held in SendMessage's own delay, and counted as waiting
    assert [params.get("DelaySeconds") for name, params, _ in calls.seen if name == "SendMessage"] == [900]


def test_a_fractional_delay_is_rounded_up(sqs: SqsQueue, calls: Calls, queue_name: str) -> None:
    """Contract: Delayed jobs (a delay is a floor, and DelaySeconds takes whole seconds)."""
    sqs.push(Records("later"), delay=0.2, queue=queue_name)
    assert [params["DelaySeconds"] for name, params, _ in calls.seen if name == "SendMessage"] == [1]
    assert sqs.size(queue_name) == 1


def test_an_oversized_message_is_rejected_before_sending(sqs: SqsQueue, calls: Calls, queue_name: str) -> None:
    """The message would exceed SQS's size limit: InvalidQueueArgumentError, naming sizes, never the value."""
    with pytest.raises(InvalidQueueArgumentError, match=f"at most {MAX_MESSAGE_BYTES}") as raised:
        sqs.push(Records("z" * MAX_MESSAGE_BYTES), queue=queue_name)
    assert "zzz" not in str(raised.value)
    with pytest.raises(InvalidQueueArgumentError), transaction.atomic():
        push_on_commit(Records("z" * MAX_MESSAGE_BYTES), queue=queue_name, connection="sqs")
    assert calls.names() == []

    # Just under the limit is sent, and comes back intact.
    label = "y" * (MAX_MESSAGE_BYTES - 300)
    job_id = sqs.push(Records(label), queue=queue_name, max_attempts=2)
    delivered = sqs.pop(5, [queue_name])
    assert delivered is not None
    assert (delivered.id, delivered.args["label"]) == (job_id, label)
    sqs.ack(delivered)
    assert sqs.size(queue_name) == 0


def test_no_queue_is_ever_created(sqs: SqsQueue, sqs_queues: SqsTestQueues, calls: Calls) -> None:
    """Contract, SQS: a name resolves through GetQueueUrl; no queue is created. The error names the queue."""
    missing = "absent" + uuid.uuid4().hex[:12]  # not this test's prefix: nothing creates it

    for _ in range(2):
        with pytest.raises(ClientError) as raised:
            sqs.push(Records("lost"), queue=missing)
        assert raised.value.response["Error"]["Code"] == "AWS.SimpleQueueService.NonExistentQueue"
        assert any(missing in note for note in raised.value.__notes__)
    with pytest.raises(ClientError):
        sqs.pop(0.5, [missing])

    assert calls.names() == ["GetQueueUrl", "GetQueueUrl", "GetQueueUrl"]  # a failed lookup is not cached
    assert "QueueUrls" not in sqs_queues.admin.list_queues(QueueNamePrefix=missing)


def test_a_fifo_queue_cannot_be_named() -> None:
    """Contract, SQS: FIFO queues are not supported; their names end in .fifo, outside the queue-name grammar."""
    with pytest.raises(InvalidQueueArgumentError):
        SqsQueue(region="us-east-1").push(Records("x"), queue="jobs.fifo")


def test_queue_prefix_is_prepended_and_counted_in_the_80_character_limit(
    moto_server: MotoServer, sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    """QUEUE_PREFIX + the queue name is the SQS queue; a name the prefix makes too long fails before any I/O."""
    prefixed = SqsQueue(
        region="us-east-1", endpoint_url=moto_server.endpoint, queue_prefix="pfx-", visibility_timeout=1
    )
    url = sqs_queues.create("pfx-" + queue_name)
    calls = Calls(prefixed)
    try:
        job_id = prefixed.push(Records("prefixed"), queue=queue_name)
        assert _counts(sqs_queues.admin, url)["Messages"] == 1
        delivered = prefixed.pop(5, [queue_name])
        assert delivered is not None
        assert (delivered.id, delivered.queue) == (job_id, queue_name)
        prefixed.ack(delivered)
        assert prefixed.size(queue_name) == 0

        calls.clear()
        too_long = "n" * 77  # valid (<= 80), but "pfx-" + it is 81
        with pytest.raises(InvalidQueueArgumentError, match="QUEUE_PREFIX"):
            prefixed.push(Records("never"), queue=too_long)
        with pytest.raises(InvalidQueueArgumentError, match="QUEUE_PREFIX"):
            prefixed.pop(1, [queue_name, too_long])
        with pytest.raises(InvalidQueueArgumentError, match="QUEUE_PREFIX"):
            prefixed.size(too_long)
        assert calls.names() == []
    finally:
        prefixed.dispose()


# -- pop --------------------------------------------------------------------------------------------


def test_pop_sweeps_every_queue_then_long_polls_the_first_rounded_up(
    sqs: SqsQueue, calls: Calls, queue_name: str
) -> None:
    """Contract: The pop() priority/timeout contract (one sweep with WaitTimeSeconds 0, then a long poll of the
    highest-priority queue for what is left of the deadline, rounded up to a whole second)."""
    high, low = f"{queue_name}-high", f"{queue_name}-low"
    start = time.monotonic()

    assert sqs.pop(1.5, [high, low]) is None

    assert time.monotonic() - start >= 1.5
    receives = calls.receives()
    assert receives[:2] == [(high, 0), (low, 0)] and len(receives) == 3
    polled, wait = receives[2]
    assert polled == high
    # The long poll waits what was left of the deadline when it was sent, rounded up to a whole second
    # (2 on a quiet machine; 1 when the two sweeps took more than half a second).
    sent = max(at for at, (name, _, _) in zip(calls.at, calls.seen, strict=True) if name == "ReceiveMessage")
    left = start + 1.5 - sent
    assert type(wait) is int and left <= wait < left + 1.05
    for name, params, _ in calls.seen:
        if name == "ReceiveMessage":
            assert params["VisibilityTimeout"] == 1 == sqs.visibility_timeout()
            assert params["MaxNumberOfMessages"] == 1
            assert params["MessageSystemAttributeNames"] == ["ApproximateReceiveCount"]
    assert sqs.size(high) == sqs.size(low) == 0


def test_a_short_deadline_still_long_polls_one_whole_second(sqs: SqsQueue, calls: Calls, queue_name: str) -> None:
    """Contract: SQS waits in whole seconds, so its wait can outlast the deadline by up to a second."""
    assert sqs.pop(0.2, [queue_name]) is None
    assert calls.receives() == [(queue_name, 0), (queue_name, 1)]


@pytest.mark.parametrize("timeout", [0, 30])
def test_a_long_or_unbounded_wait_long_polls_five_seconds_and_wakes_on_a_push(
    sqs: SqsQueue, calls: Calls, queue_name: str, timeout: float
) -> None:
    """Contract: long-poll the highest-priority queue for up to five seconds (timeout 0: no deadline)."""
    pushed: list[str] = []
    pusher = threading.Timer(0.5, lambda: pushed.append(sqs.push(Records("late"), queue=queue_name)))
    pusher.start()
    try:
        delivered = sqs.pop(timeout, [queue_name])
    finally:
        pusher.join()

    assert delivered is not None
    assert [delivered.id] == pushed
    assert calls.receives() == [(queue_name, 0), (queue_name, 5)]
    sqs.ack(delivered)
    assert sqs.size(queue_name) == 0


def test_attempts_are_the_approximate_receive_count(sqs: SqsQueue, sqs_queues: SqsTestQueues, queue_name: str) -> None:
    """Contract: QueuedJob.attempts is the message's ApproximateReceiveCount (it counts receives, not failures)."""
    sqs.push(Records("counted"), queue=queue_name)
    seen = []
    for _ in range(3):
        job = sqs.pop(5, [queue_name])
        assert job is not None
        seen.append(job.attempts)
        sqs.release(job)
    # Another consumer's receive counts too: SQS counts receives, whoever made them.
    url = sqs_queues.urls[queue_name]
    other = sqs_queues.admin.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"]
    assert len(other) == 1
    job = sqs.pop(5, [queue_name])
    assert job is not None
    assert [*seen, job.attempts] == [1, 2, 3, 5]
    sqs.ack(job)
    assert _counts(sqs_queues.admin, url) == {"Messages": 0, "MessagesDelayed": 0, "MessagesNotVisible": 0}


# -- settlements, renewal, size ---------------------------------------------------------------------


def test_release_delay_is_the_new_visibility_timeout_and_a_floor(
    sqs: SqsQueue, sqs_queues: SqsTestQueues, calls: Calls, queue_name: str
) -> None:
    """Contract, SQS: release() is ChangeMessageVisibility with the delay as the new VisibilityTimeout, counted
    from the call. The message is in flight meanwhile, so size() leaves it out."""
    sqs.push(Records("retried"), queue=queue_name)
    first = sqs.pop(5, [queue_name])
    assert first is not None
    calls.clear()
    start = time.monotonic()

    sqs.release(first, 1.5)

    assert [(name, params["VisibilityTimeout"]) for name, params, _ in calls.seen] == [("ChangeMessageVisibility", 2)]
    assert sqs.size(queue_name) == 0
    assert _counts(sqs_queues.admin, sqs_queues.urls[queue_name])["MessagesNotVisible"] == 1
    assert sqs.pop(0.2, [queue_name]) is None  # its whole-second long poll still ends before the 2 s
    second = sqs.pop(10, [queue_name])
    elapsed = time.monotonic() - start
    assert second is not None
    assert elapsed >= 1.5, f"redelivered {elapsed:.3f}s after a release with a 1.5s delay"
    assert (second.id, second.attempts, second.pushed_at) == (first.id, 2, first.pushed_at)
    sqs.ack(second)
    assert sqs.size(queue_name) == 0


@pytest.mark.parametrize("delay", [43200.5, 43201, 86400])
def test_a_release_delay_over_43200_seconds_is_rejected_before_any_call(
    sqs: SqsQueue, calls: Calls, queue_name: str, delay: float
) -> None:
    """Contract: release() across backends (SQS's own ceiling, ChangeMessageVisibility's 43200 s, checked first)."""
    sqs.push(Records("held"), queue=queue_name)
    job = sqs.pop(5, [queue_name])
    assert job is not None
    calls.clear()

    with pytest.raises(InvalidQueueArgumentError, match="43200"):
        sqs.release(job, delay)

    assert calls.names() == []
    sqs.ack(job)  # still the holder's
    assert sqs.size(queue_name) == 0


def test_a_worker_retry_waits_out_its_delay(sqs: SqsQueue, queue_name: str, outcomes: list) -> None:
    """Contract: One transition per delivery (the retry delay is the release's visibility timeout)."""
    sqs.push(FailsOnce("x"), queue=queue_name, max_attempts=2)
    worker = Worker(sqs, retry_base_delay=2)
    start = time.monotonic()
    try:
        assert worker.process_next(5, [queue_name]) is True
        assert worker.process_next(10, [queue_name]) is True
    finally:
        worker.close()
    assert time.monotonic() - start >= 2
    assert [name for name, _ in outcomes] == ["job_released", "job_succeeded"]
    assert outcomes[0][1]["delay"] == 2
    assert jobs.CALLS == [("FailsOnce", "x", 1), ("FailsOnce", "x", 2)]
    assert sqs.size(queue_name) == 0


def test_a_late_settlement_is_not_fenced(sqs: SqsQueue, sqs_queues: SqsTestQueues, queue_name: str) -> None:
    """Contract: Fenced settlements (SQS: none). A settlement with an old receipt handle raises no
    StaleJobHandleError: SQS answers it itself, and whatever it answers, the job is gone once settled."""
    sqs.push(Records("twice"), queue=queue_name)
    first = sqs.pop(5, [queue_name])
    assert first is not None
    second = sqs.pop(10, [queue_name])  # the 1 s visibility timeout passes: SQS delivers it again
    assert second is not None
    assert (second.id, second.attempts) == (first.id, 2)
    assert second.handle != first.handle

    for job in (first, second):
        try:
            sqs.ack(job)
        except StaleJobHandleError:  # pragma: no cover - the failure this test looks for
            pytest.fail("SQS settlements are unfenced: no StaleJobHandleError")
        except ClientError:
            pass  # SQS may refuse a handle it no longer knows; that answer propagates unchanged

    assert sqs.pop(1.5, [queue_name]) is None
    assert _counts(sqs_queues.admin, sqs_queues.urls[queue_name]) == {
        "Messages": 0,
        "MessagesDelayed": 0,
        "MessagesNotVisible": 0,
    }


def test_renewing_a_finished_delivery_propagates_the_sqs_answer(sqs: SqsQueue, queue_name: str) -> None:
    """Contract: SQS answers an expired or reused receipt handle itself, and that answer propagates unchanged;
    renew() never brings a deleted message back."""
    sqs.push(Records("done"), queue=queue_name)
    job = sqs.pop(5, [queue_name])
    assert job is not None
    sqs.ack(job)

    with pytest.raises(ClientError):
        sqs.renew(job)

    assert sqs.pop(1.5, [queue_name]) is None
    assert sqs.size(queue_name) == 0


def test_a_handle_from_another_backend_is_rejected(sqs: SqsQueue, queue_name: str) -> None:
    sqs.push(Records("mine"), queue=queue_name)
    job = sqs.pop(5, [queue_name])
    assert job is not None and isinstance(job.handle, SqsHandle)
    from dataclasses import replace

    with pytest.raises(InvalidQueueArgumentError):
        sqs.ack(replace(job, handle=("not", "sqs")))
    sqs.ack(job)
    assert sqs.size(queue_name) == 0


def test_size_is_visible_plus_delayed_and_leaves_in_flight_out(
    sqs: SqsQueue, sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    """Contract, SQS: size() is ApproximateNumberOfMessages + ApproximateNumberOfMessagesDelayed."""
    sqs.push(Records("a"), queue=queue_name)
    sqs.push(Records("b"), queue=queue_name)
    sqs.push(Records("later"), delay=60, queue=queue_name)
    assert sqs.size(queue_name) == 3

    held = sqs.pop(5, [queue_name])

    assert held is not None
    assert sqs.size(queue_name) == 2
    assert _counts(sqs_queues.admin, sqs_queues.urls[queue_name]) == {
        "Messages": 1,
        "MessagesDelayed": 1,
        "MessagesNotVisible": 1,
    }
    sqs.ack(held)
    assert sqs.size(queue_name) == 2


# -- the worker -------------------------------------------------------------------------------------


def test_the_heartbeat_and_the_worker_share_one_client(sqs: SqsQueue, queue_name: str, outcomes: list) -> None:
    """The heartbeat thread renews on the worker's own client (boto3 clients are thread-safe; sessions are not)."""
    seen: list[tuple[str, str]] = []
    sqs.client.meta.events.register(
        "before-parameter-build.sqs", lambda model, **kw: seen.append((model.name, threading.current_thread().name))
    )
    sqs.push(Sleeps(1.6), queue=queue_name)
    worker = Worker(sqs)
    try:
        assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()

    main = threading.current_thread().name
    assert [name for name, _ in outcomes] == ["job_succeeded"]
    assert ("ReceiveMessage", main) in seen
    assert ("DeleteMessage", main) in seen
    renewals = [thread for name, thread in seen if name == "ChangeMessageVisibility"]
    assert len(renewals) >= 2  # every 0.5 s (half the 1 s window) while the job ran 1.6 s
    assert all(thread == "kinetis-queue-heartbeat" for thread in renewals)
    assert sqs.size(queue_name) == 0
    assert sqs.pop(1.5, [queue_name]) is None  # renewed, then deleted: never delivered again


def test_calls_per_job_are_the_fewest_the_contract_allows(sqs: SqsQueue, calls: Calls, queue_name: str) -> None:
    """One SendMessage per push, one ReceiveMessage per probe, one call per settlement, renewal or size();
    GetQueueUrl once per queue for the instance's life."""
    high, low = f"{queue_name}-high", f"{queue_name}-low"
    for label in ("a", "b", "c"):
        sqs.push(Records(label), queue=low)
    assert calls.names() == ["GetQueueUrl", "SendMessage", "SendMessage", "SendMessage"]

    calls.clear()
    first = sqs.pop(5, [low])
    assert first is not None
    sqs.ack(first)
    assert calls.names() == ["ReceiveMessage", "DeleteMessage"]

    calls.clear()
    worker = Worker(sqs)
    try:
        assert worker.process_next(5, [low]) is True
    finally:
        worker.close()
    assert calls.names() == ["ReceiveMessage", "DeleteMessage"]

    calls.clear()
    third = sqs.pop(5, [high, low])  # the empty higher-priority queue costs its own probe
    assert third is not None
    sqs.renew(third)
    sqs.release(third)
    assert sqs.size(low) == 1
    again = sqs.pop(5, [low])
    assert again is not None
    sqs.fail(again)
    assert calls.names() == [
        "GetQueueUrl",
        "ReceiveMessage",
        "ReceiveMessage",  # high's URL, then the sweep: high, low
        "ChangeMessageVisibility",
        "ChangeMessageVisibility",
        "GetQueueAttributes",
        "ReceiveMessage",
        "DeleteMessage",
    ]
    assert sqs.size(low) == 0


# -- malformed messages -----------------------------------------------------------------------------


def _body(**changes: Any) -> str:
    body = {"id": uuid.uuid4().hex, "pushedAt": time.time(), "class": "tests.jobs.Records", "args": {"label": "x"}}
    body.update(changes)
    return json.dumps(body)


MALFORMED = [
    pytest.param("not json", {}, id="body-not-json"),
    pytest.param(" ", {}, id="body-blank"),
    pytest.param('["list"]', {}, id="body-array"),
    pytest.param(json.dumps({"id": uuid.uuid4().hex, "class": "tests.jobs.Noop", "args": {}}), {}, id="no-pushedAt"),
    pytest.param(_body(extra=1), {}, id="extra-key"),
    pytest.param(_body(id="A" * 32), {}, id="id-uppercase"),
    pytest.param(_body(args=["x"]), {}, id="args-array"),
    pytest.param(_body(pushedAt=-1), {}, id="pushed-at-negative"),
    pytest.param(_body(**{"class": ""}), {}, id="class-empty"),
    pytest.param(_body().replace('"x"', "NaN"), {}, id="args-nan"),
    pytest.param(_body().replace('{"label": "x"}', '{"label": "x", "label": "y"}'), {}, id="duplicate-key"),
    pytest.param(_body(), {"maxAttempts": {"DataType": "String", "StringValue": "3"}}, id="max-attempts-string"),
    pytest.param(_body(), {"maxAttempts": {"DataType": "Number", "StringValue": "-1"}}, id="max-attempts-negative"),
    pytest.param(_body(), {"maxAttempts": {"DataType": "Number", "StringValue": "1.5"}}, id="max-attempts-fraction"),
    pytest.param(_body(), {"maxAttempts": {"DataType": "Number", "StringValue": "2147483648"}}, id="max-attempts-big"),
    pytest.param(_body(), {"metadata": {"DataType": "String", "StringValue": "not json"}}, id="metadata-not-json"),
    pytest.param(_body(), {"metadata": {"DataType": "String", "StringValue": "[]"}}, id="metadata-array"),
    pytest.param(_body(), {"metadata": {"DataType": "Number", "StringValue": "1"}}, id="metadata-number"),
]


@pytest.mark.parametrize(("body", "attributes"), MALFORMED)
def test_a_malformed_message_is_deleted_and_reported(
    sqs: SqsQueue, sqs_queues: SqsTestQueues, queue_name: str, body: str, attributes: dict[str, Any]
) -> None:
    """Contract: Malformed stored messages (SQS removes it with DeleteMessage; pop() raises
    MalformedJobSettledError). The message is written by another sender, as a foreign publisher would."""
    url = sqs_queues.create(queue_name)
    extra = {"MessageAttributes": attributes} if attributes else {}
    sqs_queues.admin.send_message(QueueUrl=url, MessageBody=body, **extra)
    healthy = sqs.push(Records("healthy"), queue=queue_name)

    with pytest.raises(MalformedJobSettledError):
        sqs.pop(5, [queue_name])

    # Deleted, not merely in flight: only the healthy job is left, and it flows.
    assert _counts(sqs_queues.admin, url) == {"Messages": 1, "MessagesDelayed": 0, "MessagesNotVisible": 0}
    delivered = sqs.pop(5, [queue_name])
    assert delivered is not None
    assert (delivered.id, delivered.attempts) == (healthy, 1)
    sqs.ack(delivered)
    assert sqs.size(queue_name) == 0


def test_a_message_without_a_receive_count_is_malformed() -> None:
    """Contract, SQS: a message without ApproximateReceiveCount is malformed (decoded as received)."""
    handle = SqsHandle("http://sqs.example/1/q", "receipt")
    message = {"Body": _body(), "Attributes": {}, "ReceiptHandle": "receipt"}
    with pytest.raises(MalformedQueuedJobDataError, match="ApproximateReceiveCount"):
        decode_message(message, "q", handle)
    message["Attributes"] = {"ApproximateReceiveCount": "0"}
    with pytest.raises(MalformedQueuedJobDataError, match="ApproximateReceiveCount"):
        decode_message(message, "q", handle)
    message["Attributes"] = {"ApproximateReceiveCount": "4"}
    assert decode_message(message, "q", handle).attempts == 4


# -- commands ---------------------------------------------------------------------------------------


def test_queue_clear_names_the_backend_and_the_missing_capability_and_exits_1(sqs: SqsQueue, queue_name: str) -> None:
    """Contract: queue:clear checks the capability first and, against a backend without it, names that backend
    and the missing interface and exits 1 before touching any queue."""
    sqs.push(Records("kept"), queue=queue_name)
    env = {**os.environ, "KINETIS_TESTS_SUBPROCESS": "1", "PYTHONPATH": str(ROOT)}

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "django",
            "queue_clear",
            "--connection=sqs",
            f"--queue={queue_name}",
            "--force",
            "--settings=tests.settings",
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 1
    assert "sqs backend (SqsQueue)" in result.stderr
    assert "ClearableQueue" in result.stderr
    assert sqs.size(queue_name) == 1
    with pytest.raises(QueueNotClearableError, match="sqs backend"):
        connections.queues.clearable("sqs")
