"""Outbox rows the store does not take (docs/outbox.md, "When the store does not take a row"), on Redis, SQS and
RabbitMQ with a real relay: a queue whose store fails never holds the others; a transport error keeps the row to
be sent again; a refusal for good (SQS: no such queue, a message over the queue's MaximumMessageSize, an entry
SQS rejects) becomes a failed-job record and leaves the outbox; the rows a store took beside a refused one are
deleted, never sent again; queue_status and the dashboard show the refused rows."""

from __future__ import annotations

import io
import json
import logging
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import amqp
import pytest
import redis
from django.core.management import call_command
from django.db import transaction
from django.db.models import F
from django.test import override_settings
from django.urls import reverse

from kinetis_queue import connections
from kinetis_queue.conf import connection_settings
from kinetis_queue.contracts import DisposableQueue, Queue
from kinetis_queue.exceptions import PublishNotConfirmedError
from kinetis_queue.models import FailedJob, OutboxRecord
from kinetis_queue.outbox.relay import REFUSED_CLASS
from tests import jobs
from tests.counting_middleware import provided_metadata
from tests.integrations.test_outbox import OUTBOXES, _drain, _relay, _rows
from tests.settings import KINETIS_QUEUE, REDIS_URL
from tests.support.helpers import wait_until
from tests.support.rabbitmq_broker import SMALL_MAX_MESSAGE_SIZE, small_max_message_size

#: Where nothing listens: every store's client fails to connect (a transport error).
NOWHERE = {"redis": {"URL": "redis://127.0.0.1:1/0"}, "rabbitmq": {"URL": "amqp://guest:guest@127.0.0.1:1//"}}
NOWHERE["sqs"] = {"ENDPOINT_URL": "http://127.0.0.1:1"}
SQS_PAIRS = [name for name, _ in OUTBOXES if name.startswith("sqs")]
RABBIT_PAIRS = [name for name, _ in OUTBOXES if name.startswith("rabbit")]
DATABASES = dict(OUTBOXES)


@pytest.fixture
def built(request: pytest.FixtureRequest, queue_name: str) -> Iterator[tuple[Queue, str, Any]]:
    """The connection's queue (outbox attached), its outbox database, and the store's test support (or None)."""
    name = request.param
    database = DATABASES[name]
    backend = connection_settings(name).backend
    support = None
    if backend == "sqs":
        support = request.getfixturevalue("sqs_queues")
    elif backend == "rabbitmq":
        support = request.getfixturevalue("rabbitmq_queues")
    queue = connections.build(name)
    if support is not None:
        support.prepare(queue)
    try:
        yield queue, database, support
    finally:
        OutboxRecord.objects.using(database).filter(connection=name).delete()
        FailedJob.objects.filter(connection=name, queue__contains=queue_name[1:]).delete()
        if backend == "redis":
            queue.clear(queue_name)  # type: ignore[attr-defined]
            queue.clear(queue_name + "-b")  # type: ignore[attr-defined]
        if backend != "rabbitmq" and isinstance(queue, DisposableQueue):
            queue.dispose()


def _records(queue: Queue) -> list[FailedJob]:
    return list(FailedJob.objects.filter(connection=queue.connection).order_by("id"))


def _break(queue: Queue, name: str) -> None:
    """Make the store fail every send to queue ``name`` until _mend(): a Redis key of another type, a RabbitMQ
    queue declared with another type. (SQS: ``name`` does not exist, which is a refusal for good.)"""
    if queue.backend_name == "redis":
        redis.Redis.from_url(REDIS_URL).set(queue.keys(name).pending, "not a list")  # type: ignore[attr-defined]
    elif queue.backend_name == "rabbitmq":
        with amqp.Connection("127.0.0.1:5672", userid="guest", password="guest") as conn:
            conn.channel().queue_declare(name, durable=True, auto_delete=False, arguments={"x-queue-type": "quorum"})


def _mend(queue: Queue, name: str) -> None:
    if queue.backend_name == "redis":
        redis.Redis.from_url(REDIS_URL).delete(queue.keys(name).pending)  # type: ignore[attr-defined]
    elif queue.backend_name == "rabbitmq":
        with amqp.Connection("127.0.0.1:5672", userid="guest", password="guest") as conn:
            conn.channel().queue_delete(name)


@pytest.mark.parametrize("built", [OUTBOXES[0][0]], indirect=True)
def test_each_round_starts_one_queue_further(built: tuple[Queue, str, Any], queue_name: str) -> None:
    """No queue always waits behind another: round after round, the relay starts at the next queue with rows."""
    queue, database, _ = built
    names = [f"{queue_name}-{letter}" for letter in "abc"]
    relay = _relay(queue)
    order: list[str] = []
    relay_queue = relay._relay_queue

    def spy(db: Any, name: str) -> int:
        order.append(name)
        return relay_queue(db, name)

    relay._relay_queue = spy  # type: ignore[method-assign]
    firsts = []
    for _ in range(3):
        with transaction.atomic(using=database):
            for name in names:
                queue.push(jobs.Records(name), queue=name)
        order.clear()
        assert relay.relay_once() == 3
        assert sorted(order) == names  # every queue, once a round
        firsts.append(order[0])
    assert len(set(firsts)) == 3, firsts
    for name in names:
        assert len(_drain(queue, name, 3)) == 3


@pytest.mark.parametrize("built", [name for name, _ in OUTBOXES], indirect=True)
def test_a_queue_its_store_fails_never_holds_the_other_queues(
    built: tuple[Queue, str, Any], queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The failing queue sorts first (SELECT DISTINCT's order here): before the fix the relay stopped there.

    Redis and RabbitMQ: a failure of the store is sent again, its row kept, and once the store takes it the job is
    delivered (on Redis: the resend is not mistaken for a duplicate). SQS: a queue that does not exist is a
    refusal for good: a failed-job record with the reason, and the row leaves the outbox.
    """
    queue, database, _ = built
    sqs = queue.backend_name == "sqs"
    broken = ("p" + queue_name[1:]) if sqs else queue_name  # on SQS: not a test queue, so never created
    fine = queue_name + "-b"
    _break(queue, broken)
    try:
        with transaction.atomic(using=database):
            held = queue.push(jobs.Records("held"), queue=broken)
            sent = queue.push(jobs.Records("sent"), queue=fine)
        relay = _relay(queue)

        with caplog.at_level(logging.ERROR, logger="kinetis_queue.outbox"):
            assert relay.relay_once() == 1

        assert [job.id for job in _drain(queue, fine, 1)] == [sent]
        if sqs:
            assert _rows(queue, database) == []
            [record] = _records(queue)
            assert (record.job_id, record.queue, record.exception_class) == (held, broken, REFUSED_CLASS)
            assert "does not exist" in record.exception_message and record.attempts == 0
            assert relay.refused == 1 and relay.failing == []
            assert f"refused outbox job {held}" in caplog.text
        else:
            assert _rows(queue, database) == [held]  # kept, to be sent again
            assert relay.failing == [broken] and _records(queue) == []
            assert f"could not send queue {broken!r}" in caplog.text
            _mend(queue, broken)
            assert relay.relay_once() == 1
            assert _rows(queue, database) == []
            assert [job.id for job in _drain(queue, broken, 1)] == [held]
    finally:
        _mend(queue, broken)


@pytest.mark.parametrize("built", [name for name, _ in OUTBOXES], indirect=True)
def test_a_store_that_cannot_be_reached_keeps_every_row_and_the_relay_goes_on(
    built: tuple[Queue, str, Any], queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A transport error is no refusal: nothing is recorded, every row stays, and the rows go once the store is back."""
    queue, database, _ = built
    name = queue.connection
    assert name is not None
    entry = {**KINETIS_QUEUE["CONNECTIONS"][name], **NOWHERE[queue.backend_name]}
    with override_settings(
        KINETIS_QUEUE={**KINETIS_QUEUE, "CONNECTIONS": {**KINETIS_QUEUE["CONNECTIONS"], name: entry}}
    ):
        unreachable = connections.build(name)
    try:
        with transaction.atomic(using=database):
            ids = [
                queue.push(jobs.Records("a"), queue=queue_name),
                queue.push(jobs.Records("b"), queue=queue_name + "-b"),
            ]
        relay = _relay(unreachable)
        with caplog.at_level(logging.ERROR, logger="kinetis_queue.outbox"):
            assert relay.relay_once() == 0  # no exception: each queue failed on its own
        assert sorted(relay.failing) == [queue_name, queue_name + "-b"]
        assert sorted(_rows(queue, database)) == sorted(ids) and _records(queue) == []
        assert caplog.text.count("could not send queue") == 2
    finally:
        if isinstance(unreachable, DisposableQueue):
            unreachable.dispose()

    assert _relay(queue).relay_once() == 2
    assert [job.id for job in _drain(queue, queue_name, 1) + _drain(queue, queue_name + "-b", 1)] == ids


@pytest.mark.parametrize("built", SQS_PAIRS, indirect=True)
def test_an_sqs_message_over_its_queue_maximum_message_size_becomes_a_failed_job_and_its_batch_is_sent(
    built: tuple[Queue, str, Any], queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """SQS refuses the whole SendMessageBatch for one oversized entry: the relay sends that batch entry by entry,
    records the oversized job, and sends the others once; queue_status counts the refused row."""
    queue, database, sqs = built
    small = queue_name + "-small"
    sqs.urls[small] = sqs.admin.create_queue(QueueName=small, Attributes={"MaximumMessageSize": "1024"})["QueueUrl"]
    with transaction.atomic(using=database):
        first = queue.push(jobs.Records("small"), queue=small)
        big = queue.push(jobs.Records("x" * 2000), queue=small)  # under SQS's 1 MiB: accepted by push()
        last = queue.push(jobs.Records("small"), queue=small)
        other = queue.push(jobs.Records("other"), queue=queue_name)
    relay = _relay(queue)

    with caplog.at_level(logging.ERROR, logger="kinetis_queue.outbox"):
        assert relay.relay_once() == 3
        assert relay.relay_once() == 0

    assert _rows(queue, database) == []
    [record] = _records(queue)
    assert (record.job_id, record.queue, record.exception_class) == (big, small, REFUSED_CLASS)
    assert "Message must be shorter than 1024 bytes" in record.exception_message
    assert "xxxxxxxxxx" not in record.exception_message  # no argument value in the reason
    assert sorted(job.id for job in _drain(queue, small, 2)) == sorted([first, last])
    assert [job.id for job in _drain(queue, queue_name, 1)] == [other]
    assert queue.size(small) == 0

    out = io.StringIO()
    call_command("queue_status", f"--connection={queue.connection}", f"--queue={small}", "--json", stdout=out)
    assert json.loads(out.getvalue())["connections"][0]["outbox"]["refused"] == 1
    table = io.StringIO()
    call_command("queue_status", f"--connection={queue.connection}", f"--queue={small}", stdout=table)
    assert "0 waiting; 1 refused for good by the store, now failed jobs" in table.getvalue()


@pytest.mark.parametrize("built", SQS_PAIRS, indirect=True)
def test_a_partial_sqs_batch_deletes_the_accepted_rows_and_sends_them_once(
    built: tuple[Queue, str, Any], queue_name: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """SQS takes two entries of a SendMessageBatch and fails the third one by one ("Failed": a DelaySeconds
    above 900, let through by raising this backend's own ceiling): the two rows are deleted, never sent again."""
    from kinetis_queue.backends.sqs import queue as sqs_queue

    queue, database, _ = built
    with transaction.atomic(using=database):
        ids = [queue.push(jobs.Records(f"n{n}"), queue=queue_name) for n in range(3)]
    OutboxRecord.objects.using(database).filter(job_id=ids[1]).update(due_at=F("due_at") + 5000)
    monkeypatch.setattr(sqs_queue, "MAX_DELAY", 100_000)
    relay = _relay(queue)

    with caplog.at_level(logging.ERROR, logger="kinetis_queue.outbox"):
        assert relay.relay_once() == 2
        assert relay.relay_once() == 0

    assert _rows(queue, database) == []
    [record] = _records(queue)
    assert (record.job_id, record.exception_class) == (ids[1], REFUSED_CLASS)
    assert "DelaySeconds" in record.exception_message
    assert sorted(job.id for job in _drain(queue, queue_name, 2)) == sorted([ids[0], ids[2]])
    assert queue.size(queue_name) == 0  # each sent once


@pytest.mark.parametrize("built", RABBIT_PAIRS, indirect=True)
def test_a_partial_rabbitmq_batch_deletes_the_confirmed_rows_and_sends_the_returned_one_again(
    built: tuple[Queue, str, Any], queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The queue is deleted under the relay's connection: its immediate push comes back unroutable while the
    delayed one, routed to the delay ladder, is confirmed. The confirmed row is deleted (sent once); the returned
    one stays and is sent again, to the queue declared again."""
    queue, database, rabbit = built
    sender = connections.build(queue.connection)  # the relay's own connection: it never consumes the queue
    rabbit.prepare(sender)
    relay = _relay(sender)
    with transaction.atomic(using=database):
        queue.push(jobs.Records("declares the queue and its ladder"), queue=queue_name, delay=1)
    assert relay.relay_once() == 1
    assert len(_drain(queue, queue_name, 1)) == 1
    with amqp.Connection("127.0.0.1:5672", userid="guest", password="guest") as conn:
        conn.channel().queue_delete(queue_name)  # the relay's connection still has it declared

    with transaction.atomic(using=database):
        delayed = queue.push(jobs.Records("delayed"), queue=queue_name, delay=3)
        returned = queue.push(jobs.Records("returned"), queue=queue_name)
    with caplog.at_level(logging.ERROR, logger="kinetis_queue.outbox"):
        assert relay.relay_once() == 1
    assert _rows(queue, database) == [returned] and relay.failing == [queue_name]
    assert "returned the publish" in caplog.text and _records(queue) == []

    assert relay.relay_once() == 1
    assert _rows(queue, database) == []
    assert sorted(job.id for job in _drain(queue, queue_name, 2)) == sorted([delayed, returned])
    assert queue.pop(1, [queue_name]) is None  # the delayed job once


def _drain_all(queue: Queue, queue_name: str) -> list[str]:
    """The ids of every job waiting on ``queue_name``, each popped and acked, until a pop finds none."""
    ids: list[str] = []
    while (job := queue.pop(1, [queue_name])) is not None:
        ids.append(job.id)
        queue.ack(job)
    return ids


@pytest.mark.parametrize("built", RABBIT_PAIRS, indirect=True)
def test_a_rabbitmq_message_over_max_message_size_becomes_a_failed_job_and_its_batch_is_sent(
    built: tuple[Queue, str, Any], queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The broker refuses the big publish by closing the channel (406 PRECONDITION_FAILED), which says neither
    which publish it was nor answers the batch's others: the relay records that job, relays the rows beside it
    in the same round (a row published before it may be delivered twice: its confirmation died with the
    channel), and the same connection goes on. Before the fix the queue's every row stayed, sent every round."""
    queue, database, rabbit = built
    big = "x" * (SMALL_MAX_MESSAGE_SIZE + 100_000)  # a body over the lowered limit; push() takes it
    with small_max_message_size():
        sender = connections.build(queue.connection)  # its channels open now, under the lowered limit
        rabbit.prepare(sender)
        with transaction.atomic(using=database):
            before = queue.push(jobs.Records("before"), queue=queue_name)
            refused = queue.push(jobs.Records(big), queue=queue_name)
            after = queue.push(jobs.Records("after"), queue=queue_name)
            other = queue.push(jobs.Records("other"), queue=queue_name + "-b")
        relay = _relay(sender)

        with caplog.at_level(logging.ERROR, logger="kinetis_queue.outbox"):
            assert relay.relay_once() == 3
            assert relay.relay_once() == 0
        session = sender._session  # type: ignore[attr-defined]
        later = sender.push(jobs.Records("later"), queue=queue_name + "-b")  # the connection the broker kept
        assert sender._session is session  # type: ignore[attr-defined]

    assert _rows(queue, database) == [] and relay.failing == [] and relay.refused == 1
    [record] = _records(queue)
    assert (record.job_id, record.queue, record.exception_class, record.attempts) == (
        refused,
        queue_name,
        REFUSED_CLASS,
        0,
    )
    assert "406 PRECONDITION_FAILED" in record.exception_message
    assert f"larger than configured max size {SMALL_MAX_MESSAGE_SIZE}" in record.exception_message
    assert "xxxxxxxxxx" not in record.exception_message  # no argument value in the reason
    assert f"refused outbox job {refused}" in caplog.text and "could not send queue" not in caplog.text
    delivered = _drain_all(queue, queue_name)
    assert delivered.count(after) == 1 and 1 <= delivered.count(before) <= 2
    assert set(delivered) == {before, after}
    assert _drain_all(queue, queue_name + "-b") == [other, later]


@pytest.mark.parametrize("built", RABBIT_PAIRS[:1], indirect=True)
def test_a_rabbitmq_publish_returned_before_a_refused_one_stays_to_be_sent_again(
    built: tuple[Queue, str, Any], queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The queue is deleted under the relay's connection: the first publish comes back unroutable (its return and
    its ack both before the close), then the big one closes the channel. The returned row is kept, not taken for
    stored because it was answered, and goes once the queue is declared again; the big one is recorded."""
    queue, database, rabbit = built
    with small_max_message_size() as limit:
        sender = connections.build(queue.connection)
        rabbit.prepare(sender)
        sender.push(jobs.Records("declares the queue on the sender's connection"), queue=queue_name)
        with amqp.Connection("127.0.0.1:5672", userid="guest", password="guest") as conn:
            conn.channel().queue_delete(queue_name)
        with transaction.atomic(using=database):
            returned = queue.push(jobs.Records("returned"), queue=queue_name)
            refused = queue.push(jobs.Records("x" * (limit + 100_000)), queue=queue_name)
        relay = _relay(sender)

        with caplog.at_level(logging.ERROR, logger="kinetis_queue.outbox"):
            assert relay.relay_once() == 0
            assert _rows(queue, database) == [returned] and relay.failing == [queue_name]
            assert [record.job_id for record in _records(queue)] == [refused]
            assert relay.relay_once() == 1
    assert _rows(queue, database) == []
    assert _drain_all(queue, queue_name) == [returned]


@pytest.mark.parametrize("built", RABBIT_PAIRS, indirect=True)
def test_a_rabbitmq_job_whose_headers_do_not_fit_in_a_frame_becomes_a_failed_job_unsent(
    built: tuple[Queue, str, Any], queue_name: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """AMQP never splits a content header, and the broker closes the whole connection over one larger than
    frame_max (501): a job whose metadata (here from a metadata provider) cannot fit is refused for good before
    it is sent, and the rows beside it are relayed once, on the same connection. Before the fix the connection
    was closed every round, the row kept and its batch sent again."""
    queue, database, _ = built
    with provided_metadata(lambda job_class: {"trace": "y" * 200_000} if job_class == "tests.jobs.Noop" else {}):
        with transaction.atomic(using=database):
            before = queue.push(jobs.Records("before"), queue=queue_name)
            refused = queue.push(jobs.Noop(), queue=queue_name)
            after = queue.push(jobs.Records("after"), queue=queue_name)
        relay = _relay(queue)

        with caplog.at_level(logging.ERROR, logger="kinetis_queue.outbox"):
            assert relay.relay_once() == 2
        assert _rows(queue, database) == [] and relay.failing == [] and relay.refused == 1
        [record] = _records(queue)
        assert (record.job_id, record.exception_class) == (refused, REFUSED_CLASS)
        assert "more than one AMQP frame holds on this connection (frame_max 131072)" in record.exception_message
        assert "yyyyyyyyyy" not in record.exception_message
        assert _drain_all(queue, queue_name) == [before, after]  # each once: nothing was closed, nothing resent

        with pytest.raises(PublishNotConfirmedError, match=r"cannot take the job .*nothing was queued"):
            queue.push(jobs.Noop(), queue=queue_name)  # outside a transaction: straight to the broker
        assert queue.size(queue_name) == 0


@pytest.mark.parametrize("built", RABBIT_PAIRS[:1], indirect=True)
@pytest.mark.logs_errors("kinetis_queue.outbox")  # the relay logs the send it will retry
def test_a_rabbitmq_nack_is_no_refusal_for_good(built: tuple[Queue, str, Any], queue_name: str) -> None:
    """A queue at its x-max-length with overflow reject-publish nacks: the queue may drain (and a nack gives no
    reason: the broker also nacks on an internal error), so the row stays and goes once the queue takes it."""
    queue, database, _ = built
    policy = f"kinetis-test-{queue_name}"
    ctl = shutil.which("rabbitmqctl")
    if ctl is None:
        pytest.skip("rabbitmqctl is not available to set a queue-length policy")
    rule = json.dumps({"max-length": 0, "overflow": "reject-publish"})
    set_policy = [ctl, "-q", "set_policy", "--apply-to", "queues", policy, f"^{queue_name}$", rule]
    subprocess.run(set_policy, capture_output=True, timeout=60, check=True)
    try:
        with transaction.atomic(using=database):
            held = queue.push(jobs.Records("held"), queue=queue_name)
        relay = _relay(queue)
        assert relay.relay_once() == 0
        assert _rows(queue, database) == [held] and relay.failing == [queue_name] and _records(queue) == []
    finally:
        subprocess.run([ctl, "-q", "clear_policy", policy], capture_output=True, timeout=60, check=False)
    assert wait_until(lambda: relay.relay_once() == 1)  # the broker applies a cleared policy on its own time
    assert _rows(queue, database) == [] and _drain_all(queue, queue_name) == [held]


def test_the_dashboard_shows_the_outbox_backlog_and_its_refused_rows(queue_name: str) -> None:
    from tests.operator.test_admin import STATUS_SETTINGS, client_for

    name = "redisoutbox"
    settings = {
        **STATUS_SETTINGS,
        "CONNECTIONS": {**STATUS_SETTINGS["CONNECTIONS"], name: KINETIS_QUEUE["CONNECTIONS"][name]},
    }
    with override_settings(KINETIS_QUEUE=settings):
        queue = connections.build(name)
        try:
            with transaction.atomic(using="postgres"):
                queue.push(jobs.Records("waits"), queue=queue_name)
            FailedJob.objects.create(
                connection=name,
                queue=queue_name,
                job_id="refused0job",
                job_class="tests.jobs.Records",
                args="{}",
                attempts=0,
                exception_class=REFUSED_CLASS,
                exception_message="the redis store refused the job for good",
            )
            url = reverse("admin:kinetis_queue_failedjob_dashboard", args=[name])
            body = client_for("view_only").get(url, {"live": "1"}).content.decode()
        finally:
            OutboxRecord.objects.using("postgres").filter(connection=name).delete()
            FailedJob.objects.filter(job_id="refused0job").delete()
            queue.dispose()  # type: ignore[attr-defined]
    outbox = body[body.index('id="dashboard-outbox"') :]
    outbox = outbox[: outbox.index("</p>")]
    assert "1 push(es) waiting to be relayed" in outbox
    assert "1 refused for good by the store</strong>, now failed jobs" in outbox


def test_queue_relay_once_names_the_queues_it_could_not_send(queue_name: str, caplog: pytest.LogCaptureFixture) -> None:
    queue = connections.build("redisoutbox")
    key = queue.keys(queue_name).pending  # type: ignore[attr-defined]
    redis.Redis.from_url(REDIS_URL).set(key, "not a list")
    try:
        with transaction.atomic(using="postgres"):
            queue.push(jobs.Records("held"), queue=queue_name)
        out, err = io.StringIO(), io.StringIO()
        with caplog.at_level(logging.ERROR, logger="kinetis_queue.outbox"):
            call_command("queue_relay", "--connection=redisoutbox", "--once", stdout=out, stderr=err)
        assert out.getvalue() == "Relayed 0 job(s) of connection 'redisoutbox'.\n"
        assert err.getvalue() == (
            f"Not sent (the store failed; the rows stay in the outbox): queue(s) '{queue_name}'.\n"
        )
    finally:
        redis.Redis.from_url(REDIS_URL).delete(key)
        OutboxRecord.objects.using("postgres").filter(connection="redisoutbox").delete()
        queue.dispose()  # type: ignore[attr-defined]


@pytest.mark.parametrize("built", SQS_PAIRS, indirect=True)
def test_a_unique_job_refused_for_good_frees_its_key(
    built: tuple[Queue, str, Any], queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The job will never run: its key (held in the outbox database) is freed, as for a job acked unstarted."""
    queue, database, _ = built
    missing = "p" + queue_name[1:]
    with transaction.atomic(using=database):
        first = queue.push(jobs.Unique("u"), queue=missing)
    assert queue.push(jobs.Unique("u"), queue=missing) == first  # held
    with caplog.at_level(logging.ERROR, logger="kinetis_queue.outbox"):
        assert _relay(queue).relay_once() == 0
    assert [record.job_id for record in _records(queue)] == [first]
    with transaction.atomic(using=database):
        assert queue.push(jobs.Unique("u"), queue=missing) != first  # the key is free
