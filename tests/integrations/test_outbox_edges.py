"""The outbox relay (kinetis_queue/outbox/relay.py) where the store-by-store tests (test_outbox.py) do not reach:
a malformed row, a store that fails under SQLite's write lock, two relays meeting on SQLite, an idle relay woken
by PostgreSQL's NOTIFY, a queue without a connection name."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings
from django.db import connections as db_connections
from django.db import transaction

from kinetis_queue.backends.redis import RedisQueue
from kinetis_queue.conf import OutboxSettings
from kinetis_queue.contracts import Queue
from kinetis_queue.models import OutboxRecord
from kinetis_queue.outbox import attach
from kinetis_queue.outbox.database import DatabaseOutbox, channel
from kinetis_queue.outbox.relay import Relay
from kinetis_queue.worker.background import BackgroundLoop
from tests import jobs
from tests.faults.faultproxy import FaultProxy, Pass, Reset
from tests.support.custom_backends import NotClearable
from tests.support.helpers import before_first, wait_until

#: The edge connections' outbox: in SQLite (the relay takes the write lock) or PostgreSQL (it LISTENs).
IN_SQLITE = OutboxSettings("default", False, 0.02, 1000)
IN_POSTGRES = OutboxSettings("postgres", False, 0.02, 1000)


def _redis(name: str, outbox: OutboxSettings, url: str = settings.REDIS_URL) -> RedisQueue:
    """A Redis queue of connection ``name`` (a name no settings entry has) with its outbox attached."""
    queue = RedisQueue(url=url, prefix=settings.REDIS_PREFIX, connection=name)
    attach(queue, DatabaseOutbox(name, outbox))
    return queue


@pytest.fixture
def redis_edge(queue_name: str) -> Iterator[RedisQueue]:
    queue = _redis("edgeredis", IN_SQLITE)
    try:
        yield queue
    finally:
        OutboxRecord.objects.using("default").filter(connection="edgeredis").delete()
        queue.clear(queue_name)
        queue.dispose()


def _malformed(connection: str, queue_name: str) -> int:
    now = time.time()
    row = OutboxRecord.objects.using("default").create(
        connection=connection, queue=queue_name, job_id="m" * 32, envelope="{not json", pushed_at=now, due_at=now
    )
    return int(row.pk)


def _rows(connection: str) -> int:
    return OutboxRecord.objects.using("default").filter(connection=connection).count()


def test_a_relay_needs_a_queue_built_for_a_named_connection() -> None:
    with pytest.raises(ValueError, match="a relay needs a queue built for a named connection"):
        Relay(NotClearable(), IN_SQLITE)


def test_a_malformed_row_is_logged_and_removed_and_the_rows_around_it_are_sent(
    redis_edge: RedisQueue, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    with transaction.atomic(using="default"):
        first = redis_edge.push(jobs.Records("first"), queue=queue_name)
    bad = _malformed("edgeredis", queue_name)
    with transaction.atomic(using="default"):
        last = redis_edge.push(jobs.Records("last"), queue=queue_name)

    with caplog.at_level(logging.ERROR, logger="kinetis_queue.outbox"):
        assert Relay(redis_edge, IN_SQLITE).relay_once() == 3

    assert f"Outbox row {bad} of connection 'edgeredis' is malformed and is removed" in caplog.text
    assert _rows("edgeredis") == 0
    popped = [redis_edge.pop(5, [queue_name]) for _ in range(2)]
    assert [job.id for job in popped if job is not None] == [first, last]
    assert redis_edge.size(queue_name) == 0


@pytest.mark.parametrize("store", ["redis", "custom"])
def test_a_batch_of_malformed_rows_only_sends_nothing_and_removes_them(
    store: str, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis's own store_many() and the contract's default are both given an empty batch."""
    name = f"edge{store}"
    queue: Queue = _redis(name, IN_SQLITE) if store == "redis" else NotClearable(connection=name)
    try:
        bad = _malformed(name, queue_name)
        with caplog.at_level(logging.ERROR, logger="kinetis_queue.outbox"):
            assert Relay(queue, IN_SQLITE).relay_once() == 1
        assert f"Outbox row {bad} of connection {name!r} is malformed" in caplog.text
        assert _rows(name) == 0
        assert queue.size(queue_name) == 0
    finally:
        OutboxRecord.objects.using("default").filter(connection=name).delete()
        if isinstance(queue, RedisQueue):
            queue.dispose()


def test_on_sqlite_a_store_that_fails_rolls_the_relay_back_and_frees_the_database(
    queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The store resets every connection (a real fault, through the fault proxy): the relay's transaction rolls
    back, its rows stay, SQLite's write lock is free at once for the next push, and the next round sends all."""
    parts = urlsplit(settings.REDIS_URL)
    with FaultProxy(parts.hostname or "127.0.0.1", parts.port or 6379) as proxy:
        queue = _redis("edgeproxied", IN_SQLITE, urlunsplit(parts._replace(netloc=f"127.0.0.1:{proxy.port}")))
        relay = Relay(queue, IN_SQLITE)
        try:
            with transaction.atomic(using="default"):
                first = queue.push(jobs.Records("first"), queue=queue_name)
            proxy.set(Reset())
            with caplog.at_level(logging.ERROR, logger="kinetis_queue.outbox"):
                assert relay.relay_once() == 0  # the queue's failure is logged, the relay goes on
            assert relay.failing == [queue_name] and "ConnectionFailedError" in caplog.text
            assert _rows("edgeproxied") == 1
            with transaction.atomic(using="default"):  # would fail on a transaction left open
                second = queue.push(jobs.Records("second"), queue=queue_name)

            proxy.set(Pass())
            assert relay.relay_once() == 2
            assert _rows("edgeproxied") == 0
            popped = [queue.pop(5, [queue_name]) for _ in range(2)]
            assert [job.id for job in popped if job is not None] == [first, second]
        finally:
            OutboxRecord.objects.using("default").filter(connection="edgeproxied").delete()
            queue.clear(queue_name)
            queue.dispose()


def test_two_relays_on_sqlite_the_one_that_came_second_finds_the_rows_sent(
    redis_edge: RedisQueue, queue_name: str
) -> None:
    """Relay A lists the queue; before it takes the write lock, relay B sends the queue's rows: A's claim finds
    none, so it sends nothing and commits an empty transaction. Each job is stored once."""
    with transaction.atomic(using="default"):
        job_id = redis_edge.push(jobs.Records("once"), queue=queue_name)
    first, second = Relay(redis_edge, IN_SQLITE), Relay(redis_edge, IN_SQLITE)
    sent_by_second: list[int] = []
    calls: list[str] = []

    with db_connections["default"].execute_wrapper(
        before_first("BEGIN IMMEDIATE", lambda: sent_by_second.append(second.relay_once()), calls)
    ):
        sent_by_first = first.relay_once()

    assert (sent_by_first, sent_by_second) == (0, [1])
    assert len(calls) == 2  # both took the write lock, the second relay inside the first's round
    job = redis_edge.pop(5, [queue_name])
    assert job is not None and job.id == job_id
    assert redis_edge.size(queue_name) == 0


def test_an_idle_relay_on_postgres_listens_and_the_commit_wakes_it(queue_name: str) -> None:
    """The relay has found nothing and LISTENs on its connection's channel; a push committed then is relayed."""
    queue = _redis("edgelisten", IN_POSTGRES)
    relay = Relay(queue, IN_POSTGRES)
    loop = BackgroundLoop("outbox relay", relay.step, on_stop=relay.close)

    def listening() -> bool:
        with db_connections["postgres"].cursor() as cursor:
            cursor.execute(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE query = %s", [f'LISTEN "{channel("edgelisten")}"']
            )
            return bool(cursor.fetchone()[0])

    try:
        loop.start()
        wait_until(listening, 10)
        with transaction.atomic(using="postgres"):
            job_id = queue.push(jobs.Records("woken"), queue=queue_name)
        job = wait_until(lambda: queue.pop(1, [queue_name]), 10)
        assert job.id == job_id
    finally:
        loop.stop()
        OutboxRecord.objects.using("postgres").filter(connection="edgelisten").delete()
        queue.clear(queue_name)
        queue.dispose()
    wait_until(lambda: not listening(), 10)  # the relay closed its listener when its loop ended


def test_a_relay_sends_a_slow_store_smaller_transactions(redis_edge: RedisQueue) -> None:
    """SQS takes ten jobs per round trip: a relay transaction holds 100 rows there (a relay killed mid-batch
    resends at most that many), 500 on Redis; an explicit batch wins."""
    from kinetis_queue.backends.sqs import SqsQueue

    sqs = SqsQueue(region="us-east-1", endpoint_url="http://127.0.0.1:9", connection="edgesqs")
    assert (Relay(redis_edge, IN_SQLITE).batch, Relay(sqs, IN_SQLITE).batch) == (500, 100)
    assert Relay(sqs, IN_SQLITE, batch=7).batch == 7
