"""The transactional outbox (kinetis_queue/outbox, docs/outbox.md) on Redis, SQS and RabbitMQ, with the outbox
in PostgreSQL (and MariaDB where the database's own idiom matters): a push inside a transaction commits with
it, the relay sends committed rows once the store confirmed them, in order per queue."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.db import transaction

from kinetis_queue import connections, push_on_commit
from kinetis_queue.conf import connection_settings
from kinetis_queue.contracts import DisposableQueue, PreparedPush, Queue
from kinetis_queue.exceptions import QueueConfigurationError
from kinetis_queue.models import OutboxRecord, UniqueLockRecord
from kinetis_queue.outbox.relay import Relay, backlog
from kinetis_queue.unique import lock_of
from kinetis_queue.worker import Worker
from kinetis_queue.worker.background import BackgroundLoop
from tests import jobs
from tests.conformance.test_unique import race_for_one_key
from tests.support.helpers import wait_until

REDIS = {"BACKEND": "redis", "URL": "redis://127.0.0.1:6379/0"}
#: (connection, its outbox database)
OUTBOXES = [
    ("redisoutbox", "postgres"),
    ("sqsoutbox", "postgres"),
    ("rabbitoutbox", "postgres"),
    ("redismaria", "mariadb"),
    ("sqsmaria", "mariadb"),
    ("rabbitmaria", "mariadb"),
    ("redislite", "default"),  # SQLite: the relay takes the write lock (no SKIP LOCKED)
]


@pytest.fixture(params=OUTBOXES, ids=[name for name, _ in OUTBOXES])
def store(request: pytest.FixtureRequest, queue_name: str) -> Iterator[tuple[Queue, str]]:
    """The connection's queue (built as queue_work builds it, outbox attached) and its outbox database."""
    name, database = request.param
    backend = connection_settings(name).backend
    sqs = request.getfixturevalue("sqs_queues") if backend == "sqs" else None  # moto's endpoint first
    rabbit = request.getfixturevalue("rabbitmq_queues") if backend == "rabbitmq" else None
    queue = connections.build(name)
    for support in (sqs, rabbit):
        if support is not None:
            support.prepare(queue)
    try:
        yield queue, database
    finally:
        OutboxRecord.objects.using(database).filter(connection=name).delete()
        if rabbit is None and isinstance(queue, DisposableQueue):
            queue.dispose()


def _relay(queue: Queue) -> Relay:
    settings = connection_settings(queue.connection)
    assert settings.outbox is not None
    return Relay(queue, settings.outbox)


def _rows(queue: Queue, database: str) -> list[str]:
    return list(
        OutboxRecord.objects.using(database).filter(connection=queue.connection).values_list("job_id", flat=True)
    )


def _drain(queue: Queue, queue_name: str, n: int) -> list[Any]:
    found: list[Any] = []
    deadline = time.monotonic() + 30
    while len(found) < n and time.monotonic() < deadline:
        job = queue.pop(1, [queue_name])
        if job is not None:
            found.append(job)
            queue.ack(job)
    return found


def test_a_push_inside_a_transaction_waits_in_the_outbox_until_the_relay_sends_it(
    store: tuple[Queue, str], queue_name: str
) -> None:
    queue, database = store
    with transaction.atomic(using=database):
        job_id = queue.push(jobs.Records("in-tx", [1, 2]), queue=queue_name, max_attempts=3)
        assert _rows(queue, database) == [job_id]
    assert queue.size(queue_name) == 0  # committed, not sent yet

    assert _relay(queue).relay_once() == 1

    assert _rows(queue, database) == []
    [job] = _drain(queue, queue_name, 1)
    assert (job.id, job.args["label"], job.args["items"], job.max_attempts, job.attempts) == (
        job_id,
        "in-tx",
        [1, 2],
        3,
        1,
    )


def test_a_rolled_back_transaction_leaves_no_row_and_sends_nothing(store: tuple[Queue, str], queue_name: str) -> None:
    queue, database = store
    with pytest.raises(RuntimeError), transaction.atomic(using=database):
        queue.push(jobs.Records("rolled back"), queue=queue_name)
        raise RuntimeError("the business transaction fails")

    assert _rows(queue, database) == []
    assert _relay(queue).relay_once() == 0
    assert queue.size(queue_name) == 0


def test_outside_a_transaction_a_push_goes_straight_to_the_store(store: tuple[Queue, str], queue_name: str) -> None:
    queue, database = store
    job_id = queue.push(jobs.Records("direct"), queue=queue_name)
    assert _rows(queue, database) == []
    assert [job.id for job in _drain(queue, queue_name, 1)] == [job_id]


def test_the_relay_sends_each_queue_in_commit_order_and_push_many_in_one_transaction(
    store: tuple[Queue, str], queue_name: str
) -> None:
    queue, database = store
    ids = []
    for n in range(5):
        with transaction.atomic(using=database):
            ids.append(queue.push(jobs.Records(f"single-{n}"), queue=queue_name))
    with transaction.atomic(using=database):
        ids += queue.push_many([jobs.Records(f"batch-{n}") for n in range(20)], queue=queue_name)

    relay = _relay(queue)
    relay.batch = 7  # several rounds
    assert relay.relay_once() == 25

    popped = [job.id for job in _drain(queue, queue_name, 25)]
    if queue.backend_name == "sqs":  # a standard SQS queue keeps no order
        assert sorted(popped) == sorted(ids)
    else:
        assert popped == ids


def test_a_delay_counts_from_the_push_not_from_the_relay(store: tuple[Queue, str], queue_name: str) -> None:
    queue, database = store
    with transaction.atomic(using=database):
        job_id = queue.push(jobs.Records("later"), queue=queue_name, delay=2)
    pushed = time.time()
    wait_until(lambda: time.time() > pushed + 1.2, 5)  # the relay comes a while after the push

    assert _relay(queue).relay_once() == 1
    # Still delayed unless the 2 s have passed meanwhile: a loaded machine can take longer than the 0.8 s left
    # to relay, and then the job is rightly there. Either way it came back no sooner than 2 s after its push.
    early = queue.pop(0.1, [queue_name])
    [job] = [early] if early is not None else _drain(queue, queue_name, 1)
    returned = time.time()
    assert job.id == job_id
    assert returned >= job.pushed_at.timestamp() + 2, "delivered before its delay had passed"
    assert returned - pushed < 5  # not the whole delay again after the relay (SQS and RabbitMQ: whole seconds)


def test_push_on_commit_on_an_outbox_connection_writes_the_row_in_the_transaction(
    store: tuple[Queue, str], queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue, database = store
    monkeypatch.setattr(connections.queues, "_queues", {**connections.queues._queues, queue.connection: queue})
    with transaction.atomic(using=database):
        job_id = push_on_commit(jobs.Records("hook"), queue=queue_name, using=database, connection=queue.connection)
        assert _rows(queue, database) == [job_id]  # no commit hook: the row is part of the transaction
    assert _relay(queue).relay_once() == 1
    assert [job.id for job in _drain(queue, queue_name, 1)] == [job_id]


def test_a_unique_push_through_the_outbox_takes_its_key_in_the_same_transaction(
    store: tuple[Queue, str], queue_name: str
) -> None:
    """The lock row and the outbox row commit, or roll back, together; the worker frees the key in that database."""
    queue, database = store
    lock = lock_of(queue.prepare(jobs.Unique("u"), queue=queue_name))
    assert lock is not None
    with pytest.raises(RuntimeError), transaction.atomic(using=database):
        queue.push(jobs.Unique("u"), queue=queue_name)
        raise RuntimeError("rolled back")
    assert not UniqueLockRecord.objects.using(database).filter(lock_key=lock.key).exists()
    assert _rows(queue, database) == []

    with transaction.atomic(using=database):
        first = queue.push(jobs.Unique("u"), queue=queue_name)
        assert queue.push(jobs.Unique("u"), queue=queue_name) == first
    assert _rows(queue, database) == [first]
    assert queue.push(jobs.Unique("u"), queue=queue_name) == first  # held, in the outbox database, after the commit

    assert _relay(queue).relay_once() == 1
    worker = Worker(queue, recorder=None)
    try:
        assert worker.process_next(10, [queue_name]) is True
    finally:
        worker.close()
    with transaction.atomic(using=database):
        assert queue.push(jobs.Unique("u"), queue=queue_name) != first  # the worker freed the key
    _relay(queue).relay_once()
    _drain(queue, queue_name, 1)


def test_an_idle_relay_sends_a_committed_row_without_being_asked(store: tuple[Queue, str], queue_name: str) -> None:
    """PostgreSQL wakes it with the row's NOTIFY; MariaDB's relay finds it at its next poll."""
    queue, database = store
    relay = _relay(queue)
    loop = BackgroundLoop("outbox relay", relay.step, on_stop=relay.close)
    loop.start()
    try:
        with transaction.atomic(using=database):
            job_id = queue.push(jobs.Records("woken"), queue=queue_name)
        [job] = _drain(queue, queue_name, 1)
    finally:
        loop.stop()
    assert job.id == job_id


def test_the_relay_of_a_row_sent_twice_stores_it_once_on_redis(queue_name: str) -> None:
    """A relay killed between the send and the delete leaves the rows to the next one: Redis recognises the resend."""
    queue = connections.build("redisoutbox")
    try:
        prepared = queue.prepare(jobs.Records("twice"), queue=queue_name)
        queue.store_many([prepared])
        queue.store_many([prepared])
        assert queue.size(queue_name) == 1
        other = queue.prepare(jobs.Records("twice"), queue=queue_name)
        queue.store_many([PreparedPush(other.envelope, 0, queue_name)])  # another push of the same job: stored
        assert queue.size(queue_name) == 2
    finally:
        queue.clear(queue_name)  # type: ignore[attr-defined]
        queue.dispose()  # type: ignore[attr-defined]


def test_queue_relay_once_and_the_backlog(store: tuple[Queue, str], queue_name: str) -> None:
    queue, database = store
    settings = connection_settings(queue.connection)
    assert settings.outbox is not None
    assert queue.size(queue_name) == 0  # SQS: the test's queue is created on first lookup
    with transaction.atomic(using=database):
        queue.push_many([jobs.Records(f"n{n}") for n in range(3)], queue=queue_name)
    count, oldest = backlog(queue.connection, settings.outbox)
    assert count == 3 and oldest is not None and oldest <= time.time()

    out = io.StringIO()
    call_command("queue_relay", f"--connection={queue.connection}", "--once", stdout=out)

    assert out.getvalue() == f"Relayed 3 job(s) of connection {queue.connection!r}.\n"
    assert backlog(queue.connection, settings.outbox) == (0, None)
    _drain(queue, queue_name, 3)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"BACKEND": "sql", "OUTBOX": "default"},
            "['OUTBOX'] is not a setting of the sql backend: the SQL backend's push",
        ),
        ({"BACKEND": "sync", "OUTBOX_ALWAYS": True}, "['OUTBOX_ALWAYS'] is not a setting of the sync backend"),
        ({**REDIS, "OUTBOX": "nowhere"}, "['OUTBOX'] must name an alias in DATABASES"),
        ({**REDIS, "OUTBOX": "default", "OUTBOX_POLL": 0}, "['OUTBOX_POLL'] must be more than 0"),
        ({**REDIS, "OUTBOX": "default", "OUTBOX_ALWAYS": 1}, "['OUTBOX_ALWAYS'] must be True or False"),
    ],
)
def test_outbox_settings_are_checked_naming_the_key(entry: dict[str, Any], message: str) -> None:
    from django.test import override_settings

    with override_settings(KINETIS_QUEUE={"CONNECTIONS": {"default": entry}}):
        with pytest.raises(QueueConfigurationError) as raised:
            connection_settings("default")
    assert message in str(raised.value)


def test_outbox_always_routes_a_push_outside_a_transaction_too(queue_name: str) -> None:
    from django.test import override_settings

    from tests.settings import KINETIS_QUEUE

    entry = {**KINETIS_QUEUE["CONNECTIONS"]["redisoutbox"], "OUTBOX_ALWAYS": True}
    with override_settings(
        KINETIS_QUEUE={**KINETIS_QUEUE, "CONNECTIONS": {**KINETIS_QUEUE["CONNECTIONS"], "redisoutbox": entry}}
    ):
        queue = connections.build("redisoutbox")
        try:
            job_id = queue.push(jobs.Records("always"), queue=queue_name)
            assert _rows(queue, "postgres") == [job_id] and queue.size(queue_name) == 0
            assert _relay(queue).relay_once() == 1
            assert [job.id for job in _drain(queue, queue_name, 1)] == [job_id]
        finally:
            OutboxRecord.objects.using("postgres").filter(connection="redisoutbox").delete()
            queue.dispose()  # type: ignore[attr-defined]


def test_queue_status_shows_the_backlog_and_check_w005_warns_above_outbox_warn(queue_name: str) -> None:
    import json

    from django.core.checks import run_checks
    from django.test import override_settings

    from tests.settings import KINETIS_QUEUE

    entry = {**KINETIS_QUEUE["CONNECTIONS"]["redisoutbox"], "OUTBOX_WARN": 2}
    changed = {**KINETIS_QUEUE, "CONNECTIONS": {**KINETIS_QUEUE["CONNECTIONS"], "redisoutbox": entry}}
    with override_settings(KINETIS_QUEUE=changed):
        queue = connections.build("redisoutbox")
        try:
            with transaction.atomic(using="postgres"):
                queue.push_many([jobs.Records(f"n{n}") for n in range(3)], queue=queue_name)
            out = io.StringIO()
            call_command("queue_status", "--connection=redisoutbox", "--json", stdout=out)
            outbox = json.loads(out.getvalue())["connections"][0]["outbox"]
            assert (outbox["database"], outbox["waiting"], outbox["warn"]) == ("postgres", 3, 2)
            table = io.StringIO()
            call_command("queue_status", "--connection=redisoutbox", stdout=table)
            assert "Outbox of redisoutbox (database postgres): 3 waiting" in table.getvalue()
            assert "above OUTBOX_WARN (2)" in table.getvalue()
            warned = [m for m in run_checks(databases=["postgres"]) if m.id == "kinetis_queue.W005"]
            assert [m.obj for m in warned] == ["redisoutbox"]
            assert "holds 3 pushes, above its OUTBOX_WARN (2)" in warned[0].msg
            assert _relay(queue).relay_once() == 3
            assert [m for m in run_checks(databases=["postgres"]) if m.id == "kinetis_queue.W005"] == []
        finally:
            OutboxRecord.objects.using("postgres").filter(connection="redisoutbox").delete()
            queue.clear(queue_name)  # type: ignore[attr-defined]
            queue.dispose()  # type: ignore[attr-defined]


def test_a_task_enqueued_in_a_transaction_goes_through_the_outbox_of_its_connection(queue_name: str) -> None:
    """django.tasks: the result row and the outbox row commit together (the result row's database is the outbox's)."""
    pytest.importorskip("django.tasks")
    from django.test import override_settings

    from tests import task_defs

    backend = {
        "BACKEND": "kinetis_queue.tasks.KinetisTaskBackend",
        "QUEUES": [],
        "OPTIONS": {"CONNECTION": "redislite"},
    }
    with override_settings(TASKS={"default": backend}):
        queue = connections.queues["redislite"]
        try:
            with transaction.atomic(using="default"):
                result = task_defs.add.using(queue_name=queue_name).enqueue(2, 3)
                assert len(_rows(queue, "default")) == 1  # in this transaction, beside the result row
            assert queue.size(queue_name) == 0
            assert _relay(queue).relay_once() == 1
            worker = Worker(queue, recorder=None)
            try:
                assert worker.process_next(10, [queue_name]) is True
            finally:
                worker.close()
            result.refresh()
            assert result.return_value == 5
        finally:
            OutboxRecord.objects.using("default").filter(connection="redislite").delete()


def test_a_queued_receiver_on_an_outbox_connection_pushes_in_the_transaction() -> None:
    from tests import operator_receivers

    queue = connections.queues["redisoutbox"]
    name = operator_receivers.OUTBOX_QUEUE
    queue.clear(name)  # type: ignore[attr-defined]
    try:
        with transaction.atomic(using="postgres"):
            operator_receivers.order_shipped.send(sender=None, parcel=7)
            assert len(_rows(queue, "postgres")) == 1
        assert queue.size(name) == 0
        assert _relay(queue).relay_once() == 1
        assert queue.size(name) == 1
    finally:
        OutboxRecord.objects.using("postgres").filter(connection="redisoutbox").delete()
        queue.clear(name)  # type: ignore[attr-defined]


def test_concurrent_pushes_taking_over_an_expired_key_in_the_outbox_database_keep_every_acknowledged_job(
    store: tuple[Queue, str], queue_name: str
) -> None:
    """Issue 27 item 16 on the Django-database lock store in each outbox database (MariaDB included): pushes
    outside a transaction, racing on one key as it expires; every id a push acknowledged is stored once."""
    queue, _ = store
    race_for_one_key(queue, queue_name)
