"""SQS backend, issue 14: unreserve(), ack_many(), pop_many() and push_many() against moto's server.

Calls are counted with botocore's own event hooks on the backend's clients (tests/specific/test_sqs.py's
Calls), which observe each request without changing it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from kinetis_queue.backends.sqs.queue import MAX_MESSAGE_BYTES, SqsHandle, SqsQueue, decode_message
from kinetis_queue.contracts import JobSettlement
from kinetis_queue.exceptions import MalformedQueuedJobDataError, StaleJobHandleError
from tests.jobs import Records
from tests.specific.test_sqs import Calls, _body, _counts
from tests.support.sqs_server import MotoServer, SqsTestQueues


@pytest.fixture
def sqs(moto_server: MotoServer, sqs_queues: SqsTestQueues) -> Iterator[SqsQueue]:
    """An SQS queue on moto whose deliveries stay hidden 30 s, so no test races a visibility timeout."""
    queue = SqsQueue(region="us-east-1", endpoint_url=moto_server.endpoint, visibility_timeout=30, connection="sqs")
    sqs_queues.prepare(queue)
    yield queue
    queue.dispose()


@pytest.fixture
def calls(sqs: SqsQueue) -> Calls:
    return Calls(sqs)


def _one(sqs: SqsQueue, queue: str) -> Any:
    job = sqs.pop(5, [queue])
    assert job is not None
    return job


# -- unreserve --------------------------------------------------------------------------------------


def test_unreserve_gives_the_job_back_with_the_same_attempt_number(
    sqs: SqsQueue, sqs_queues: SqsTestQueues, calls: Calls, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQS counts every receive, so unreserve() sends the job again carrying its completed attempts and deletes
    the delivered message: the next delivery has the same attempt number, id, pushedAt, args, cap and metadata."""
    monkeypatch.setattr(sqs, "_metadata", lambda: {"trace": "t-1"})
    job_id = sqs.push(Records("given back", [1, 2]), queue=queue_name, max_attempts=5)
    first = _one(sqs, queue_name)
    calls.clear()

    sqs.unreserve(first)

    assert calls.names() == ["ChangeMessageVisibility", "SendMessage", "DeleteMessage"]
    assert _counts(sqs_queues.admin, sqs_queues.urls[queue_name]) == {
        "Messages": 1,
        "MessagesDelayed": 0,
        "MessagesNotVisible": 0,
    }
    again = _one(sqs, queue_name)
    assert (again.id, again.attempts, again.pushed_at) == (job_id, 1, first.pushed_at)
    assert (again.job_class, again.args, again.max_attempts, again.metadata) == (
        first.job_class,
        first.args,
        5,
        {"trace": "t-1"},
    )

    # A release still charges its attempt, and an unreserve of that next attempt keeps it.
    sqs.release(again)
    second = _one(sqs, queue_name)
    assert second.attempts == 2
    sqs.unreserve(second)
    third = _one(sqs, queue_name)
    assert (third.id, third.attempts) == (job_id, 2)
    sqs.ack(third)
    assert sqs.size(queue_name) == 0
    assert sqs.pop(1, [queue_name]) is None


def test_unreserve_of_a_settled_delivery_is_stale_and_writes_nothing(
    sqs: SqsQueue, calls: Calls, queue_name: str
) -> None:
    """The fence is SQS's own answer to the receipt (ReceiptHandleIsInvalid once the message is gone)."""
    sqs.push(Records("done"), queue=queue_name)
    job = _one(sqs, queue_name)
    sqs.ack(job)
    calls.clear()

    with pytest.raises(StaleJobHandleError) as refused:
        sqs.unreserve(job)

    assert refused.value.operation is JobSettlement.UNRESERVE
    assert calls.names() == ["ChangeMessageVisibility"]
    assert sqs.size(queue_name) == 0


def test_the_carried_attempts_attribute_is_decoded_and_checked() -> None:
    handle = SqsHandle("http://sqs.example/1/q", "receipt")
    message: dict[str, Any] = {
        "Body": _body(),
        "Attributes": {"ApproximateReceiveCount": "2"},
        "MessageAttributes": {"attempts": {"DataType": "Number", "StringValue": "3"}},
    }
    assert decode_message(message, "q", handle).attempts == 5  # 3 carried + this message's second receive
    for bad in ({"DataType": "String", "StringValue": "3"}, {"DataType": "Number", "StringValue": "-1"}):
        message["MessageAttributes"] = {"attempts": bad}
        with pytest.raises(MalformedQueuedJobDataError, match="attempts"):
            decode_message(message, "q", handle)
    message["MessageAttributes"] = {"attempts": {"DataType": "Number", "StringValue": str(2**31 - 1)}}
    with pytest.raises(MalformedQueuedJobDataError, match="attempts"):
        decode_message(message, "q", handle)  # the sum is past the counter's range


# -- ack_many ---------------------------------------------------------------------------------------


def _held(sqs: SqsQueue, queue: str, count: int) -> list[Any]:
    held: list[Any] = []
    while len(held) < count:
        reserved = sqs.pop_many(5, [queue], count - len(held))
        assert reserved.malformed == [] and reserved.jobs
        held += reserved.jobs
    return held


def test_ack_many_deletes_ten_receipts_per_call(sqs: SqsQueue, calls: Calls, queue_name: str) -> None:
    sqs.push_many([Records(f"job-{i}") for i in range(12)], queue=queue_name)
    held = _held(sqs, queue_name, 12)
    calls.clear()

    assert sqs.ack_many(held) == [None] * 12

    batches = [params["Entries"] for name, params, _ in calls.seen]
    assert calls.names() == ["DeleteMessageBatch", "DeleteMessageBatch"]
    assert [len(entries) for entries in batches] == [10, 2]
    assert [entry["ReceiptHandle"] for entries in batches for entry in entries] == [
        job.handle.receipt_handle for job in held
    ]
    assert sqs.size(queue_name) == 0
    assert sqs.pop(1, [queue_name]) is None


def test_ack_many_reports_a_receipt_sqs_refuses_as_stale_in_its_place(
    sqs: SqsQueue, sqs_queues: SqsTestQueues, calls: Calls, queue_name: str
) -> None:
    """Deliveries from two queues: one DeleteMessageBatch per queue. The second queue's message was removed by
    someone else (a purge), so SQS refuses its receipt (ReceiptHandleIsInvalid): reported, not raised."""
    other = queue_name + "-other"
    sqs.push_many([Records("a"), Records("b")], queue=queue_name)
    sqs.push(Records("purged"), queue=other)
    held = _held(sqs, queue_name, 2)
    gone = _one(sqs, other)
    sqs_queues.admin.purge_queue(QueueUrl=sqs_queues.urls[other])
    calls.clear()

    results = sqs.ack_many([held[0], gone, held[1]])

    assert results[0] is None and results[2] is None
    assert isinstance(results[1], StaleJobHandleError)
    assert results[1].operation is JobSettlement.ACK
    assert calls.names() == ["DeleteMessageBatch", "DeleteMessageBatch"]
    assert sqs.size(queue_name) == sqs.size(other) == 0
    assert _counts(sqs_queues.admin, sqs_queues.urls[queue_name])["MessagesNotVisible"] == 0


def test_ack_many_sends_a_repeated_receipt_in_a_later_batch(sqs: SqsQueue, calls: Calls, queue_name: str) -> None:
    """SQS refuses a whole DeleteMessageBatch naming one receipt twice; a repeat goes into the next call."""
    sqs.push(Records("twice"), queue=queue_name)
    job = _one(sqs, queue_name)
    calls.clear()

    results = sqs.ack_many([job, job])

    assert calls.names() == ["DeleteMessageBatch", "DeleteMessageBatch"]
    assert results[0] is None  # the second is SQS's own answer for a deleted message's receipt
    assert sqs.size(queue_name) == 0


# -- pop_many ---------------------------------------------------------------------------------------


def test_pop_many_receives_up_to_ten_messages_per_call(sqs: SqsQueue, calls: Calls, queue_name: str) -> None:
    ids = sqs.push_many([Records(f"job-{i}") for i in range(12)], queue=queue_name)
    calls.clear()

    first = sqs.pop_many(5, [queue_name], 12)
    second = sqs.pop_many(5, [queue_name], 12)

    receives = [params for name, params, _ in calls.seen if name == "ReceiveMessage"]
    assert [(p["MaxNumberOfMessages"], p["WaitTimeSeconds"]) for p in receives] == [(10, 0), (10, 0)]
    assert (len(first.jobs), len(second.jobs)) == (10, 2)
    held = first.jobs + second.jobs
    assert sorted(job.id for job in held) == sorted(ids)
    assert all(job.attempts == 1 and job.queue == queue_name for job in held)
    assert sqs.ack_many(held) == [None] * 12
    assert sqs.size(queue_name) == 0


def test_pop_many_asks_each_queue_in_priority_order_for_what_is_missing(
    sqs: SqsQueue, calls: Calls, queue_name: str
) -> None:
    high, low = queue_name + "-high", queue_name + "-low"
    sqs.push_many([Records(f"high-{i}") for i in range(2)], queue=high)
    sqs.push_many([Records(f"low-{i}") for i in range(5)], queue=low)
    calls.clear()

    reserved = sqs.pop_many(5, [high, low], 3)

    assert [job.queue for job in reserved.jobs] == [high, high, low]
    assert [
        (params["QueueUrl"].rsplit("/", 1)[1], params["MaxNumberOfMessages"])
        for name, params, _ in calls.seen
        if name == "ReceiveMessage"
    ] == [(high, 3), (low, 1)]
    assert sqs.ack_many(reserved.jobs) == [None] * 3
    assert sqs.size(high) == 0 and sqs.size(low) == 4


def test_a_malformed_message_in_a_batch_is_deleted_and_reported_beside_the_deliveries(
    sqs: SqsQueue, sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    url = sqs_queues.create(queue_name)
    sqs.push_many([Records("a"), Records("b")], queue=queue_name)
    sqs_queues.admin.send_message(QueueUrl=url, MessageBody="not json")
    sqs.push(Records("c"), queue=queue_name)

    reserved = sqs.pop_many(5, [queue_name], 10)

    assert sorted(job.args["label"] for job in reserved.jobs) == ["a", "b", "c"]
    assert len(reserved.malformed) == 1
    assert _counts(sqs_queues.admin, url) == {"Messages": 0, "MessagesDelayed": 0, "MessagesNotVisible": 3}
    assert sqs.ack_many(reserved.jobs) == [None] * 3
    assert _counts(sqs_queues.admin, url)["MessagesNotVisible"] == 0


def test_pop_many_long_polls_the_first_queue_for_a_batch(sqs: SqsQueue, calls: Calls, queue_name: str) -> None:
    """The same loop as pop(): a sweep, then the highest-priority queue long-polled, asking for the whole limit."""
    pushed: list[str] = []
    pusher = threading.Timer(0.5, lambda: pushed.extend(sqs.push_many([Records("x"), Records("y")], queue=queue_name)))
    pusher.start()
    try:
        reserved = sqs.pop_many(0, [queue_name], 10)
    finally:
        pusher.join()

    assert reserved.jobs and {job.id for job in reserved.jobs} <= set(pushed)
    assert [
        (params["MaxNumberOfMessages"], params["WaitTimeSeconds"])
        for name, params, _ in calls.seen
        if name == "ReceiveMessage"
    ] == [(10, 0), (10, 5)]
    held = reserved.jobs + _held(sqs, queue_name, 2 - len(reserved.jobs))
    assert sqs.ack_many(held) == [None] * 2
    assert sqs.size(queue_name) == 0


# -- push_many --------------------------------------------------------------------------------------


def _batches_sent(calls: Calls) -> list[list[dict[str, Any]]]:
    return [params["Entries"] for name, params, _ in calls.seen if name == "SendMessageBatch"]


def test_push_many_of_25_is_three_batches_and_returns_the_ids_in_order(
    sqs: SqsQueue, calls: Calls, queue_name: str
) -> None:
    ids = sqs.push_many([Records(f"job-{i}") for i in range(25)], queue=queue_name)

    assert calls.names() == ["GetQueueUrl", "SendMessageBatch", "SendMessageBatch", "SendMessageBatch"]
    batches = _batches_sent(calls)
    assert [len(entries) for entries in batches] == [10, 10, 5]
    sent = [entry for entries in batches for entry in entries]
    assert [entry["Id"] for entry in sent] == [str(i) for i in range(25)]
    assert [json.loads(entry["MessageBody"])["id"] for entry in sent] == ids
    assert [json.loads(entry["MessageBody"])["args"]["label"] for entry in sent] == [f"job-{i}" for i in range(25)]
    held = _held(sqs, queue_name, 25)
    assert {job.id: job.args["label"] for job in held} == {job_id: f"job-{i}" for i, job_id in enumerate(ids)}
    assert sqs.ack_many(held) == [None] * 25
    assert sqs.size(queue_name) == 0


def test_send_many_keeps_each_jobs_delay_queue_and_attributes(sqs: SqsQueue, calls: Calls, queue_name: str) -> None:
    other = queue_name + "-other"
    prepared = [
        sqs.prepare(Records("now"), queue=queue_name),
        sqs.prepare(Records("later"), delay=1.5, queue=queue_name, max_attempts=3),
        sqs.prepare(Records("elsewhere"), delay=60, queue=other),
        sqs.prepare(Records("now too"), queue=queue_name),
    ]

    ids = sqs.send_many(prepared)

    assert ids == [item.id for item in prepared]
    batches = _batches_sent(calls)
    assert [[(entry["Id"], entry["DelaySeconds"]) for entry in entries] for entries in batches] == [
        [("0", 0), ("1", 2), ("3", 0)],
        [("2", 60)],
    ]
    assert batches[0][1]["MessageAttributes"] == {"maxAttempts": {"DataType": "Number", "StringValue": "3"}}
    assert sqs.size(queue_name) == 3 and sqs.size(other) == 1
    held = _held(sqs, queue_name, 3)
    assert {job.id for job in held} == {ids[0], ids[1], ids[3]}
    assert sqs.ack_many(held) == [None] * 3


def test_a_batch_over_sqs_total_size_limit_is_split(sqs: SqsQueue, calls: Calls, queue_name: str) -> None:
    """SQS refuses a SendMessageBatch whose messages total more than MAX_MESSAGE_BYTES: batches split by size."""
    label = "z" * 400_000
    ids = sqs.push_many([Records(label + str(i)) for i in range(3)], queue=queue_name)

    assert [len(entries) for entries in _batches_sent(calls)] == [2, 1]
    assert sum(len(entry["MessageBody"]) for entry in _batches_sent(calls)[0]) <= MAX_MESSAGE_BYTES
    held = _held(sqs, queue_name, 3)
    assert {job.id: job.args["label"] for job in held} == {job_id: label + str(i) for i, job_id in enumerate(ids)}
    assert sqs.ack_many(held) == [None] * 3


def test_an_entry_sqs_refuses_is_named_after_every_batch_was_sent(sqs: SqsQueue, calls: Calls, queue_name: str) -> None:
    """One entry of the first batch refused by SQS (a DelaySeconds it rejects, written into the request on its
    way out): the push goes on, then raises naming that job's index; every other job is stored."""

    def corrupt(params: dict[str, Any], **kwargs: Any) -> None:
        if params["Entries"][0]["Id"] == "0":
            params["Entries"][3]["DelaySeconds"] = 901

    sqs.send_client.meta.events.register("before-parameter-build.sqs.SendMessageBatch", corrupt)

    with pytest.raises(ClientError, match=r"^jobs\[3\]: ") as refused:
        sqs.push_many([Records(f"job-{i}") for i in range(12)], queue=queue_name)

    assert refused.value.response["Error"]["Code"] == "InvalidParameterValue"
    assert any("jobs[3]" in note for note in refused.value.__notes__)
    assert calls.names().count("SendMessageBatch") == 2
    held = _held(sqs, queue_name, 11)
    assert sorted(job.args["label"] for job in held) == sorted(f"job-{i}" for i in range(12) if i != 3)
    assert sqs.ack_many(held) == [None] * 11
    assert sqs.size(queue_name) == 0


# -- threads ----------------------------------------------------------------------------------------


def test_threads_using_one_queue_at_first_use_build_one_pair_of_clients(
    moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Worker threads (--concurrency) share one SqsQueue: however many reach it first at once, one client pair
    is built and shared (boto3 clients are thread-safe; sessions are not, so each client has its own)."""
    queue = SqsQueue(region="us-east-1", endpoint_url=moto_server.endpoint, visibility_timeout=30)
    built: list[str] = []
    real = queue._new_client

    def slow_new_client(attempts: int) -> Any:
        built.append(threading.current_thread().name)
        time.sleep(0.05)  # widens the window in which a second thread could build its own
        return real(attempts)

    monkeypatch.setattr(queue, "_new_client", slow_new_client)
    start = threading.Barrier(8)
    seen: list[tuple[Any, Any]] = []

    def first_use() -> None:
        start.wait()
        seen.append((queue.client, queue.send_client))

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(built) == 2
        assert len(seen) == 8 and len(set(map(id, (pair[0] for pair in seen)))) == 1
        assert len({id(pair[1]) for pair in seen}) == 1
    finally:
        queue.dispose()


def test_sixteen_threads_share_the_client_without_overflowing_its_connection_pool(
    sqs: SqsQueue, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """--concurrency 16 means up to 16 job threads, the heartbeat and the reserving loop calling at once; botocore's
    default pool keeps 10 connections and urllib3 warns and discards every connection beyond them."""
    sqs.size(queue_name)  # the clients and the queue's URL exist before the threads start
    start = threading.Barrier(16)
    errors: list[BaseException] = []

    def call() -> None:
        start.wait()
        try:
            for _ in range(3):
                sqs.size(queue_name)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(16)]
    with caplog.at_level("WARNING", logger="urllib3"):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert errors == []
    assert [r.getMessage() for r in caplog.records if "pool is full" in r.getMessage()] == []


def test_threads_reserving_and_acking_at_once_take_every_job(sqs: SqsQueue, queue_name: str) -> None:
    """Four threads share one SqsQueue: every job is taken and acked, without error, and none is left.

    Not "each exactly once": a standard queue may return a message to two receives (AWS documents at-least-once
    delivery, and the backend's row says so: Backend.atomic_reserve is False for SQS), and moto's receive is not
    atomic across its server's threads either (it checks and marks each message without a lock), which is how a
    clean CI run once saw a job taken twice with a 30 s visibility timeout.
    """
    ids = sqs.push_many([Records(f"job-{i}") for i in range(40)], queue=queue_name)
    taken: list[str] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def work() -> None:
        try:
            while True:
                reserved = sqs.pop_many(0.5, [queue_name], 3)
                if not reserved.jobs:
                    return
                assert sqs.ack_many(reserved.jobs) == [None] * len(reserved.jobs)
                with lock:
                    taken.extend(job.id for job in reserved.jobs)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert set(taken) == set(ids)
    assert sqs.size(queue_name) == 0
