"""Redis backend from several threads at once (``queue_work --concurrency``): one RedisQueue, many callers.

The worker's reserving thread calls pop_many()/ack_many(), job threads push, release and unreserve,
the heartbeat renews. The client hands each command a connection of its own, so replies can never
be crossed between threads; these tests hammer that, and the one way a reply could still be read
by the wrong command: an exception raised between a command's write and its read.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from kinetis_queue.backends.redis import RedisQueue
from kinetis_queue.contracts import QueuedJob
from tests.jobs import Records
from tests.settings import REDIS_URL

THREADS = 8
ROUNDS = 30


@pytest.fixture
def queue() -> Iterator[RedisQueue]:
    prefix = f"kinetis_test_{uuid.uuid4().hex[:12]}:"
    built = RedisQueue(url=REDIS_URL, prefix=prefix, visibility_timeout=30)
    yield built
    built.dispose()
    direct = redis.Redis.from_url(REDIS_URL)
    stale = list(direct.scan_iter(match=f"{prefix}*", count=1000))
    if stale:
        direct.delete(*stale)
    direct.close()


def test_threads_hammering_one_queue_deliver_and_ack_every_job_exactly_once(queue: RedisQueue, queue_name: str) -> None:
    """Every operation at once from THREADS threads: no crossed reply, no lost or doubled job, no error."""
    pushed: list[str] = []
    acked: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(THREADS)

    def settle(held: list[QueuedJob], turn: int) -> None:
        for job in held:
            assert job.args["label"].startswith("t")  # a crossed reply would not decode to one of ours
            queue.renew(job)
        if turn % 3 == 0 and held:
            queue.unreserve(held.pop())  # back as it was: someone acks it later
        if turn % 5 == 0 and held:
            queue.release(held.pop())  # back with attempts + 1: someone acks it later
        results = queue.ack_many(held)
        assert results == [None] * len(held)
        with lock:
            acked.extend(job.id for job in held)

    def work(number: int) -> None:
        try:
            start.wait()
            for turn in range(ROUNDS):
                ids = queue.push_many([Records(f"t{number}-{turn}-{i}") for i in range(3)], queue=queue_name)
                ids.append(queue.push(Records(f"t{number}-{turn}-single"), queue=queue_name))
                with lock:
                    pushed.extend(ids)
                reserved = queue.pop_many(0.05, [queue_name], 4)
                assert reserved.malformed == []
                settle(list(reserved.jobs), turn)
                single = queue.pop(0.05, [queue_name])
                if single is not None:
                    queue.ack(single)
                    with lock:
                        acked.append(single.id)
                assert queue.size(queue_name) >= 0
        except BaseException as exc:
            errors.append(exc)
            raise

    threads = [threading.Thread(target=work, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert errors == []

    while reserved := queue.pop_many(0.2, [queue_name], 50):  # what the threads left behind
        assert queue.ack_many(reserved.jobs) == [None] * len(reserved.jobs)
        acked.extend(job.id for job in reserved.jobs)
    assert len(pushed) == THREADS * ROUNDS * 4
    assert Counter(acked) == Counter(pushed)  # each job acked once, none lost, none doubled
    assert queue.stats(queue_name).reserved == 0
    assert len(queue._client._opened) <= 2 * THREADS  # never more connections than concurrent commands


class Interrupted(BaseException):
    """What a signal handler raises in the middle of a command (the worker's job timeout, say)."""


def test_a_command_interrupted_between_its_write_and_its_read_never_lends_its_reply_to_the_next(
    queue: RedisQueue, queue_name: str
) -> None:
    """The first command's reply is still on its way (a BLPOP blocking for a moment) when an exception
    leaves it unread; the next command on the client must read its own reply, not that one."""
    client = queue._client
    assert client.execute("PING") == b"PONG"  # one idle connection, the one the next command takes
    (conn,) = client._idle
    real = conn.read_response

    def interrupted(*args: Any, **kwargs: Any) -> Any:
        del conn.read_response  # back to the real method for the next command
        raise Interrupted

    conn.read_response = interrupted  # type: ignore[method-assign]
    with pytest.raises(Interrupted):
        client.execute("BLPOP", f"{queue.prefix}{queue_name}:nothing", "0.5")  # written; its reply comes in 0.5 s

    assert client.execute("ECHO", "mine") == b"mine"
    assert conn.read_response == real
