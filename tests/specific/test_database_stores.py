"""The Django-database stores of unique locks and concurrency slots (kinetis_queue/unique/database.py,
kinetis_queue/limits/database.py) where the conformance suite does not reach: a push that loses the race for a
free key, a push whose store fails, a lock that outlives the sync backend's inline run, a missing lock table,
and two first takers of a key's slots."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings
from django.db import OperationalError, transaction
from django.db import connections as db_connections

from kinetis_queue import connections
from kinetis_queue.backends.redis import RedisQueue
from kinetis_queue.conf import OutboxSettings
from kinetis_queue.contracts import Queue
from kinetis_queue.exceptions import ConnectionFailedError
from kinetis_queue.limits import slot_key, slot_store_of
from kinetis_queue.models import UniqueLockRecord
from kinetis_queue.outbox import attach
from kinetis_queue.outbox.database import DatabaseOutbox
from kinetis_queue.unique import lock_of
from tests import jobs
from tests.faults.faultproxy import FaultProxy, Pass, Reset
from tests.support.helpers import before_first, in_thread, wait_until


def _lock_key(queue: Queue, job: jobs.Unique, queue_name: str) -> str:
    lock = lock_of(queue.prepare(job, queue=queue_name))
    assert lock is not None
    return lock.key


@pytest.fixture
def redisoutbox(queue_name: str) -> Iterator[Queue]:
    """Redis with its outbox, and so its unique locks, in PostgreSQL (the Django-database store there)."""
    queue = connections.build("redisoutbox")
    try:
        yield queue
    finally:
        queue.clear(queue_name)  # type: ignore[attr-defined]
        queue.dispose()  # type: ignore[attr-defined]


def test_a_push_that_loses_the_race_for_a_free_key_gives_way_to_the_winner(redisoutbox: Queue, queue_name: str) -> None:
    """The key had no row when the push looked; another pusher's row is committed before the push's insert: the
    insert conflicts, and the push, looking again, finds the winner holding the key."""
    key = _lock_key(redisoutbox, jobs.Unique("race"), queue_name)
    now = time.time()

    def winner_commits() -> None:
        in_thread(
            lambda: UniqueLockRecord.objects.using("postgres").create(
                lock_key=key, job_id="w" * 32, until="settled", expires_at=now + 60, claimed_at=now, confirmed=True
            )
        ).join()

    calls: list[str] = []
    with db_connections["postgres"].execute_wrapper(
        before_first('INSERT INTO "kinetis_queue_unique_locks"', winner_commits, calls)
    ):
        job_id = redisoutbox.push(jobs.Unique("race"), queue=queue_name)

    assert len(calls) == 1
    assert job_id == "w" * 32
    assert redisoutbox.size(queue_name) == 0
    UniqueLockRecord.objects.using("postgres").filter(lock_key=key).delete()


def test_a_push_whose_store_fails_gives_the_key_back(queue_name: str) -> None:
    """The store resets the connection (the fault proxy): the push raises, its key is free again, and the next
    push, with the store back, takes it."""
    parts = urlsplit(settings.REDIS_URL)
    with FaultProxy(parts.hostname or "127.0.0.1", parts.port or 6379) as proxy:
        url = urlunsplit(parts._replace(netloc=f"127.0.0.1:{proxy.port}"))
        queue = RedisQueue(url=url, prefix=settings.REDIS_PREFIX, connection="lockproxied")
        attach(queue, DatabaseOutbox("lockproxied", OutboxSettings("default", False, 0.02, 1000)))
        key = _lock_key(queue, jobs.Unique("u"), queue_name)
        try:
            proxy.set(Reset())
            with pytest.raises(ConnectionFailedError):
                queue.push(jobs.Unique("u"), queue=queue_name)
            assert not UniqueLockRecord.objects.using("default").filter(lock_key=key).exists()

            proxy.set(Pass())
            job_id = queue.push(jobs.Unique("u"), queue=queue_name)
            assert UniqueLockRecord.objects.using("default").get(lock_key=key).job_id == job_id
            assert queue.push(jobs.Unique("u"), queue=queue_name) == job_id
            assert queue.size(queue_name) == 1
        finally:
            UniqueLockRecord.objects.using("default").filter(lock_key=key).delete()
            queue.clear(queue_name)
            queue.dispose()


def test_on_the_sync_backend_a_lock_held_until_it_expires_outlives_the_inline_run(queue_name: str) -> None:
    queue = connections.build("sync")
    first = queue.push(jobs.UniqueForAWhile("once"), queue=queue_name)

    assert queue.push(jobs.UniqueForAWhile("once"), queue=queue_name) == first
    assert [call[1] for call in jobs.CALLS if call[0] == "Unique"] == ["once"]  # the second push never ran
    key = _lock_key(queue, jobs.UniqueForAWhile("once"), queue_name)
    assert UniqueLockRecord.objects.using("default").get(lock_key=key).job_id == first


def test_a_unique_push_whose_lock_table_is_missing_raises_and_stores_nothing(queue_name: str) -> None:
    """The Django-database store tries a rolled-back decision again (a deadlock, a busy SQLite), then raises."""
    queue = connections.build("sync")
    with db_connections["default"].cursor() as cursor:
        cursor.execute("ALTER TABLE kinetis_queue_unique_locks RENAME TO kinetis_queue_unique_locks_away")
    try:
        with pytest.raises(OperationalError, match="no such table: kinetis_queue_unique_locks"):
            queue.push(jobs.Unique("nowhere"), queue=queue_name)
    finally:
        with db_connections["default"].cursor() as cursor:
            cursor.execute("ALTER TABLE kinetis_queue_unique_locks_away RENAME TO kinetis_queue_unique_locks")
    assert jobs.CALLS == []  # never run


def test_two_first_takers_of_a_key_with_one_slot_get_one_slot_between_them() -> None:
    """PostgreSQL: the key has no slot rows yet. The first taker creates them and takes the slot, uncommitted;
    the second finds no row, creates them too (waiting on the first's insert), then finds the slot taken."""
    queue = connections.build("postgres")
    store = slot_store_of(queue)
    key = slot_key("postgres", f"first-takers-{uuid.uuid4().hex}")
    with db_connections["postgres"].cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        second_taker = cursor.fetchone()[0]
    first_holds = threading.Event()
    first: list[object] = []

    def first_taker() -> None:
        with transaction.atomic(using="postgres"):
            first.append(store.acquire(key, 1, "a" * 32, 60))
            first_holds.set()

            def second_waits() -> bool:
                with db_connections["postgres"].cursor() as cursor:
                    cursor.execute(
                        "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'",
                        [second_taker],
                    )
                    return bool(cursor.fetchone()[0])

            wait_until(second_waits, 20)

    try:
        thread = in_thread(first_taker)
        assert first_holds.wait(20)
        second = store.acquire(key, 1, "b" * 32, 60)
        thread.join()

        assert second is None
        [slot] = first
        assert slot is not None
        store.release(slot)  # type: ignore[arg-type]
        third = store.acquire(key, 1, "c" * 32, 60)
        assert third is not None
        store.release(third)
    finally:
        queue.dispose()  # type: ignore[attr-defined]
