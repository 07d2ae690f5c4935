"""Issue 20: a Redis Cluster master fails over (``CLUSTER FAILOVER`` on its replica) while workers are killed
and jobs are pushed; no push that was acknowledged is lost (docs/backends/redis.md, "Redis Cluster").

The redis-cluster connection waits for one replica after each push (WAIT_REPLICAS 1), so an acknowledged
push is on the replica that takes over. The fault tier's other scenarios do not run on this row
(Backend.fault_tier): this is its scenario.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from kinetis_queue import connections as queue_connections
from kinetis_queue.contracts import DisposableQueue
from tests.faults import history, procs
from tests.faults.harness import finish, push
from tests.faults.history import new_tag
from tests.faults.jobs import Tagged
from tests.support.backends import ALL_BACKENDS

ROW = next(row for row in ALL_BACKENDS if row.id == "redis-cluster")
#: Jobs a worker finishes before the nemesis may kill it: about 20 kills for the 300 jobs, whatever the machine's speed.
SHARE = 15


@pytest.mark.fault
@pytest.mark.timeout(300)
def test_a_master_failover_during_a_kill_storm_loses_no_acknowledged_push(
    redis_cluster: Any, queue_name: str, history_dir: Path, seed: int, run_id: str
) -> None:
    """Two failovers of the queue's master, each while 100 jobs are pushed; 2 workers, a SIGKILL a second."""
    queue = queue_connections.build(ROW.connection)
    rng = random.Random(seed)
    pushed = 0

    def push_some(count: int) -> None:
        nonlocal pushed
        for _ in range(count):
            push(queue, Tagged(new_tag(run_id, pushed), rng.randint(10, 50)), queue_name)
            pushed += 1

    def done() -> int:
        return len({e["tag"] for e in history.read(history_dir) if e["e"] == "exec.done"})

    failovers = 0
    try:
        push_some(100)
        with procs.Pool(ROW, [queue_name], history_dir, 2, "--sleep=0.5", "--concurrency=1") as pool:
            for _ in range(2):
                replica = redis_cluster.replica_serving(f"{{{queue_name}}}")
                nemesis = threading.Thread(target=redis_cluster.failover, args=(replica,))
                nemesis.start()
                push_some(100)  # while the master hands over
                nemesis.join()
                failovers += 1
                pool.kill(rng.randrange(len(pool.processes)))
                pool.respawn()
            deadline = time.monotonic() + 120
            while done() < pushed and time.monotonic() < deadline:
                time.sleep(1.0)  # the nemesis's pace, not a wait for a condition
                # Only a worker that has done its share since it was spawned: a kill a second regardless starved
                # the storm on a loaded machine (workers killed while still starting; 132 s against 10-15 s).
                targets = pool.working(SHARE)
                if targets:
                    pool.kill(rng.choice(targets))
                    pool.respawn()
        unexpected_exits = pool.unexpected_exits()
        drain_s = procs.drain(queue, [queue_name])
        report = finish(
            "redis-cluster-failover-kill-storm",
            ROW.id,
            seed,
            history_dir,
            queue_name,
            drain_s=drain_s,
            extra={"kills": pool.kills, "failovers": failovers, "unexpected_exits": unexpected_exits},
        )
    finally:
        if isinstance(queue, DisposableQueue):
            queue.dispose()
    assert failovers == 2 and report["kills"] >= 1
    assert report["lost"] == 0, report["lost_tags"]
    assert report["unexpected"] == 0
    assert report["worker_stops"] == 0 and unexpected_exits == []
