"""Wake-ups (issue 14): PostgreSQL pushes NOTIFY and an idle pop LISTENs; elsewhere POLL_PAUSE polls.

The waits are asserted by what ended them (a notification received for the queue's channel), never
by how long they took: the pause is the contract's longest (1 s) and the pop's timeout is far longer.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import connections as db_connections
from django.db import transaction

from kinetis_queue.backends.sql import SqlQueue
from kinetis_queue.backends.sql.options import OPTIONS
from kinetis_queue.backends.sql.queue import DUE_MARGIN, POLLING_POLL_PAUSE, channel
from kinetis_queue.exceptions import QueueConfigurationError
from tests.jobs import Noop
from tests.support.helpers import wait_until


@pytest.fixture
def received(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The channels of the notifications every psycopg connection's notifies() yields, in order."""
    channels: list[str] = []
    real = psycopg.Connection.notifies

    def spy(self: psycopg.Connection[Any], **kwargs: Any) -> Iterator[psycopg.Notify]:
        for notify in real(self, **kwargs):
            channels.append(notify.channel)
            yield notify

    monkeypatch.setattr(psycopg.Connection, "notifies", spy)
    return channels


def _waits(queue: SqlQueue, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, ...]]:
    calls: list[tuple[str, ...]] = []
    real = queue._wait

    def spy(queues: tuple[str, ...], seconds: float) -> None:
        calls.append(queues)
        real(queues, seconds)

    monkeypatch.setattr(queue, "_wait", spy)
    return calls


def _pop_in_thread(queue: SqlQueue, queues: list[str], out: list[Any]) -> threading.Thread:
    thread = threading.Thread(target=lambda: out.append(queue.pop(60, queues)), daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("bulk", [False, True], ids=["push", "push_many"])
def test_a_push_wakes_a_waiting_pop_through_notify(
    queue_name: str, received: list[str], monkeypatch: pytest.MonkeyPatch, bulk: bool
) -> None:
    worker = SqlQueue(database="postgres", visibility_timeout=30, poll_pause=1.0)
    pusher = SqlQueue(database="postgres")
    waits = _waits(worker, monkeypatch)
    out: list[Any] = []
    try:
        thread = _pop_in_thread(worker, [queue_name], out)
        wait_until(lambda: len(waits) >= 2)  # the first wait LISTENs and returns; the second waits
        job_ids = pusher.push_many([Noop()], queue=queue_name) if bulk else [pusher.push(Noop(), queue=queue_name)]
        thread.join(30)
        assert out and out[0] is not None and out[0].id == job_ids[0]
        assert received == [channel(queue_name)]  # the wait ended on the push's notification
        worker.ack(out[0])
    finally:
        worker.dispose()


def test_a_rolled_back_push_notifies_nobody_and_a_committed_one_does(
    queue_name: str, received: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = SqlQueue(database="postgres", visibility_timeout=30, poll_pause=1.0)
    pusher = SqlQueue(database="postgres")
    waits = _waits(worker, monkeypatch)
    out: list[Any] = []
    try:
        thread = _pop_in_thread(worker, [queue_name], out)
        wait_until(lambda: len(waits) >= 2)
        with pytest.raises(ZeroDivisionError), transaction.atomic(using="postgres"):
            pusher.push(Noop(), queue=queue_name)
            1 / 0  # noqa: B018
        kept = pusher.push(Noop(), queue=queue_name)
        thread.join(30)
        assert out and out[0] is not None and out[0].id == kept
        assert received == [channel(queue_name)]  # one notification: the committed push's
        worker.ack(out[0])
    finally:
        worker.dispose()


def test_each_thread_listens_on_its_own_connection_and_every_waiting_thread_is_woken(
    queue_name: str, received: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    worker = SqlQueue(database="postgres", visibility_timeout=30, poll_pause=1.0)
    pusher = SqlQueue(database="postgres")
    waits = _waits(worker, monkeypatch)
    out: list[Any] = []
    try:
        threads = [_pop_in_thread(worker, [queue_name], out) for _ in range(2)]
        wait_until(lambda: len(waits) >= 4)
        pusher.push_many([Noop(), Noop()], queue=queue_name)
        for thread in threads:
            thread.join(30)
        assert len(out) == 2 and all(job is not None for job in out)
        assert len({job.id for job in out}) == 2
        assert len(worker._opened) == 4  # per thread: a claiming connection and a listening one
        assert worker.ack_many(out) == [None, None]
    finally:
        worker.dispose()


def test_the_listened_channels_follow_the_queues_asked_for(
    queue_name: str, received: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pop on other queues stops listening to the old ones: a push there wakes nobody.

    Both pops run in one thread, so they share its listener (each thread listens on its own)."""
    worker = SqlQueue(database="postgres", visibility_timeout=30, poll_pause=1.0)
    pusher = SqlQueue(database="postgres")
    other = queue_name + "-other"
    try:
        waits = _waits(worker, monkeypatch)
        out: list[Any] = []

        def pops() -> None:
            out.append(worker.pop(0.05, [queue_name]))  # listens to queue_name
            out.append(worker.pop(60, [other]))

        thread = threading.Thread(target=pops, daemon=True)
        thread.start()
        wait_until(lambda: waits.count((other,)) >= 2)  # the second wait on ``other`` listens only to it
        pusher.push(Noop(), queue=queue_name)
        job_id = pusher.push(Noop(), queue=other)
        thread.join(30)
        assert len(out) == 2 and out[0] is None and out[1] is not None and out[1].id == job_id
        assert received == [channel(other)]
        worker.ack(out[1])
    finally:
        pusher.clear(queue_name)
        worker.dispose()


def test_a_broken_listener_is_replaced_and_the_pop_still_finds_the_job(queue_name: str) -> None:
    worker = SqlQueue(database="postgres", visibility_timeout=30, poll_pause=0.05)
    try:
        assert worker.pop(0.2, [queue_name]) is None
        listener = worker._local.listener
        listener.connection.close()  # as a server restart would
        job_id = SqlQueue(database="postgres").push(Noop(), queue=queue_name)
        delivered = worker.pop(5, [queue_name])
        assert delivered is not None and delivered.id == job_id
        worker.ack(delivered)
        assert worker.pop(0.2, [queue_name]) is None
        assert worker._local.listener is not listener  # a new listener replaced the broken one
    finally:
        worker.dispose()


@pytest.mark.parametrize("database", ["default", "mariadb"], ids=["sqlite", "mariadb"])
def test_databases_without_notify_poll_with_a_short_pause(database: str) -> None:
    assert SqlQueue(database=database).poll_pause == POLLING_POLL_PAUSE
    assert SqlQueue(database=database, poll_pause=0.2).poll_pause == 0.2


def test_postgresql_pauses_up_to_the_contracts_bound_as_notify_wakes_it() -> None:
    assert SqlQueue(database="postgres").poll_pause == 1.0


@pytest.mark.parametrize("value", [0, -1, 1.5, "0.1", True])
def test_poll_pause_is_checked(value: Any) -> None:
    with pytest.raises(QueueConfigurationError, match="POLL_PAUSE"):
        OPTIONS.resolve({"POLL_PAUSE": value}, ("KINETIS_QUEUE", "CONNECTIONS", "sql"))


def test_poll_pause_defaults_to_the_databases_own() -> None:
    assert OPTIONS.resolve({}, ("KINETIS_QUEUE",))["POLL_PAUSE"] is None


def test_a_dropped_listener_is_no_longer_kept_for_dispose(queue_name: str) -> None:
    worker = SqlQueue(database="postgres", visibility_timeout=30, poll_pause=0.05)
    try:
        for _ in range(3):
            assert worker.pop(0.2, [queue_name]) is None
            worker._local.listener.connection.close()
        assert worker.pop(0.2, [queue_name]) is None
        assert len(worker._opened) == 2  # the claiming connection and the one live listener
    finally:
        worker.dispose()


def test_an_idle_wait_ends_when_the_next_delayed_job_is_due(queue_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A delay ends without a NOTIFY: the wait is shortened to the due time instead of lasting the pause."""
    worker = SqlQueue(database="postgres", visibility_timeout=30, poll_pause=1.0)
    timeouts: list[float] = []
    real = psycopg.Connection.notifies

    def spy(self: psycopg.Connection[Any], **kwargs: Any) -> Iterator[psycopg.Notify]:
        timeouts.append(kwargs["timeout"])
        yield from real(self, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "notifies", spy)
    try:
        assert worker.pop(0.05, [queue_name]) is None  # listening from now on
        job_id = SqlQueue(database="postgres").push(Noop(), queue=queue_name, delay=0.5)
        delivered = worker.pop(10, [queue_name])
        assert delivered is not None and delivered.id == job_id
        # Each wait after the push is cut to the due time (at most 0.5 s from the push, plus the margin the wait
        # ends after it), not the 1 s pause; the push's own NOTIFY may end the first of them early.
        assert timeouts and all(timeout <= 0.5 + DUE_MARGIN for timeout in timeouts[1:]), timeouts
        worker.ack(delivered)
    finally:
        worker.dispose()


def test_dispose_during_an_idle_wait_ends_the_wait_and_the_pop_goes_on_with_new_connections(queue_name: str) -> None:
    """dispose() from another thread closes the listener a pop is waiting on (the worker disposes its queue
    while its reserving thread may be idle): the wait fails, nothing of the disposed queue's state is kept,
    and the pop goes on with connections of its own that dispose() will close."""
    worker = SqlQueue(database="postgres", visibility_timeout=30, poll_pause=1.0)
    out: list[Any] = []
    try:
        thread = _pop_in_thread(worker, [queue_name], out)
        wait_until(lambda: len(worker._opened) == 2)  # the claiming connection and the listener
        old = list(worker._opened)
        pids = [db.connection.info.backend_pid for db in old if db.connection is not None]
        # The listener LISTENs, the next sweep claims nothing, then the wait reads NEXT_DUE just before
        # it waits for a notification: after that query, the pop is in (or about to enter) that wait.
        wait_until(lambda: _last_query_reads_next_due(pids))
        worker.dispose()
        job_id = SqlQueue(database="postgres").push(Noop(), queue=queue_name)
        thread.join(30)

        assert not thread.is_alive()
        assert [job.id for job in out] == [job_id]
        assert len(worker._opened) == 1 and worker._opened[0] not in old  # a new claiming connection only
        worker.ack(out[0])
    finally:
        worker.dispose()


def _last_query_reads_next_due(pids: list[int]) -> bool:
    with db_connections["postgres"].cursor() as cursor:
        cursor.execute("SELECT query FROM pg_stat_activity WHERE pid = ANY(%s)", [pids])
        return any(row[0].startswith("SELECT MIN(available_at)") for row in cursor.fetchall())
