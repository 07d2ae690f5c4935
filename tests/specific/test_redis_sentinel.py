"""Issue 20: the redis backend on a Sentinel-managed master follows a failover (docs/backends/redis.md, "Sentinel").

A local master, replica and three sentinels (the redis_sentinels fixture); the redissentinel connection waits
for the replica after each push (WAIT_REPLICAS 1). ``SENTINEL FAILOVER`` promotes the replica: pushes and pops
keep working on the new master, and every push acknowledged before, during or after it is delivered.
"""

from __future__ import annotations

from typing import Any

from kinetis_queue import connections as queue_connections
from kinetis_queue.backends.redis import RedisQueue
from kinetis_queue.exceptions import ConnectionFailedError, OutcomeUnknownError
from tests.jobs import Noop


def _push(queue: RedisQueue, queue_name: str, acknowledged: set[str]) -> None:
    try:
        acknowledged.add(queue.push(Noop(), queue=queue_name))
    except (ConnectionFailedError, OutcomeUnknownError) as exc:
        print("push not acknowledged:", exc)  # the test claims nothing about it: the count below is the check


def test_pushes_and_pops_keep_working_across_a_sentinel_failover(redis_sentinels: Any, queue_name: str) -> None:
    queue = queue_connections.build("redissentinel")
    assert isinstance(queue, RedisQueue)
    acknowledged: set[str] = set()
    try:
        for _ in range(20):
            _push(queue, queue_name, acknowledged)
        assert len(acknowledged) == 20
        first = queue.pop(1, [queue_name])
        assert first is not None
        queue.ack(first)
        delivered = {first.id}
        old = redis_sentinels.master()

        new = redis_sentinels.failover()

        assert new != old
        for _ in range(20):
            _push(queue, queue_name, acknowledged)
        # Once the old master replicates from the new one (failover() waits for that), every push is acknowledged.
        assert len(acknowledged) == 40
        for _ in range(200):
            try:
                job = queue.pop(0.2, [queue_name])
            except (ConnectionFailedError, OutcomeUnknownError):
                continue
            if job is None:
                break
            queue.ack(job)
            delivered.add(job.id)
        assert acknowledged <= delivered
        assert queue.size(queue_name) == 0
    finally:
        queue.dispose()
