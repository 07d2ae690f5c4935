"""Redis queue_names(): SCAN walks the database in steps, so a listing spans several round trips.

The test's keys live under a key prefix of their own, deleted afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from kinetis_queue.backends.redis import RedisQueue
from kinetis_queue.backends.redis.queue import SCAN_COUNT
from tests.jobs import Noop
from tests.settings import REDIS_URL


@pytest.fixture
def prefix() -> Iterator[str]:
    """A key prefix no other test uses; every key under it is deleted afterwards."""
    value = f"kinetis_test_{uuid.uuid4().hex[:12]}:"
    yield value
    client = redis.Redis.from_url(REDIS_URL)
    stale = list(client.scan_iter(match=f"{value}*", count=1000))
    if stale:
        client.delete(*stale)
    client.close()


def test_queue_names_lists_every_queue_when_the_database_takes_several_scan_steps(prefix: str) -> None:
    """Three SCAN_COUNTs of other keys: one SCAN step sees about a third, so every queue needs every step."""
    client = redis.Redis.from_url(REDIS_URL)
    with client.pipeline(transaction=False) as pipe:
        for number in range(3 * SCAN_COUNT):
            pipe.set(f"{prefix}kinetis_queue:filler{number}:other", b"x")  # matches the pattern, not a queue key
        pipe.execute()
    client.close()
    queue = RedisQueue(url=REDIS_URL, prefix=prefix, visibility_timeout=30)
    try:
        names = [f"q{number:02d}" for number in range(40)]
        for name in names:
            queue.push(Noop(), queue=name)
        assert queue.queue_names() == names
    finally:
        queue.dispose()
