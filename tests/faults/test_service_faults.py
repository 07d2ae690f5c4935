"""B1/B3, the service itself fails mid-run (RELIABILITY.md §3 B1, B3); backend-specific by nature.

B1: a private redis-server (``appendonly yes``, ``appendfsync always``, the persistence the docs
require) is killed with SIGKILL under a pusher and two workers, and restarted from its AOF.
B3: every worker session of this run on PostgreSQL is ended with ``pg_terminate_backend()`` every
500 ms for 5 s. Contract: "What push() guarantees" (a push that returned has a stored job behind
it) and "Failure vocabulary" (a transport error stops the worker; the harness starts a new one).
What must hold: no job whose push returned is lost, nothing unexpected runs, the store is empty
after the drain, and every worker ends by itself or on SIGTERM (no call hangs).
"""

from __future__ import annotations

import dataclasses
import random
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from kinetis_queue import conf, connections
from kinetis_queue.contracts import DisposableQueue, Queue
from tests.faults import history, procs, stores
from tests.faults.harness import finish, push
from tests.faults.history import new_tag
from tests.faults.jobs import Tagged
from tests.faults.servers import PrivateRedis
from tests.support.backends import BACKENDS, SQL_BACKENDS, Backend

pytestmark = [pytest.mark.fault, pytest.mark.timeout(180)]

REDIS = [b for b in BACKENDS if settings.KINETIS_QUEUE["CONNECTIONS"][b.connection]["BACKEND"] == "redis"]
#: Not behind a pooler: there the worker's server sessions are shared with other clients (Backend.pooled).
POSTGRES = [
    b for b in SQL_BACKENDS if settings.DATABASES[b.database or ""]["ENGINE"].endswith("postgresql") and not b.pooled
]


class Pusher(threading.Thread):
    def __init__(self, queue: Queue, queue_name: str, run_id: str, count: int, rate: float) -> None:
        super().__init__(name="pusher", daemon=True)
        self.queue, self.queue_name, self.run_id, self.count, self.rate = queue, queue_name, run_id, count, rate

    def run(self) -> None:
        for i in range(self.count):
            push(self.queue, Tagged(new_tag(self.run_id, i), ms=10), self.queue_name)
            time.sleep(1 / self.rate)


def _run_until_drained(
    pool: procs.Pool, store: Any, queue_name: str, pusher: threading.Thread | None, timeout: float = 120
) -> None:
    """Replace stopped workers until the pusher is done and the store is empty."""
    deadline = time.monotonic() + timeout
    while (pusher is not None and pusher.is_alive()) or store.remaining(queue_name):
        assert time.monotonic() < deadline, "the queue did not drain"
        pool.respawn()
        time.sleep(0.5)


def _stop_all(pool: procs.Pool) -> list[int]:
    """SIGTERM every worker; a worker that needs longer than 10 s is hung on a call."""
    hung = []
    for process in pool.processes:
        process.send_signal(signal.SIGTERM)
    for process in pool.processes:
        try:
            pool.exits.append(process.wait(timeout=10))
        except subprocess.TimeoutExpired:
            hung.append(process.pid)
            process.kill()
            pool.exits.append(process.wait(timeout=30))
    pool.processes = []
    return hung


@pytest.mark.parametrize("backend", REDIS, ids=lambda b: b.id)
def test_redis_sigkill_and_restart_loses_no_acknowledged_push(
    backend: Backend, private_redis: PrivateRedis, queue_name: str, history_dir: Path, seed: int, run_id: str
) -> None:
    url = f"redis://127.0.0.1:{private_redis.port}/0"
    base = conf.connection_settings(backend.connection)
    queue_settings = dataclasses.replace(base, options={**base.options, "URL": url})
    queue = connections.backend_class(base).from_settings(queue_settings)
    store = stores.RedisStore(backend, queue, url=url)
    rng = random.Random(seed)
    pusher = Pusher(queue, queue_name, run_id, count=300, rate=60)
    try:
        with procs.Pool(backend, [queue_name], history_dir, 2, "--sleep=0.5", port=private_redis.port) as pool:
            pusher.start()
            time.sleep(rng.uniform(1, 3))  # the nemesis's pace: a kill at a random point of the run
            private_redis.kill()
            time.sleep(1)
            private_redis.start()
            _run_until_drained(pool, store, queue_name, pusher)
            hung = _stop_all(pool)
        drain_s = procs.drain(queue, [queue_name], store)
        report = finish(
            "B1-redis-sigkill-aof-always",
            backend.id,
            seed,
            history_dir,
            queue_name,
            store=store,
            drain_s=drain_s,
            extra={"hung_workers": hung, "worker_exit_codes": sorted(set(pool.exits))},
        )
    finally:
        if isinstance(queue, DisposableQueue):
            queue.dispose()
    assert report["attempted"] == 300
    assert report["lost"] == 0, report["lost_tags"]
    assert report["unexpected"] == 0 and report["store_remaining"] == 0
    assert report["stale_accepted"] == 0 and hung == []


@pytest.mark.parametrize("backend", POSTGRES, ids=lambda b: b.id)
def test_pg_terminate_backend_burst_loses_nothing(
    backend: Backend, queue_name: str, history_dir: Path, seed: int, run_id: str
) -> None:
    queue = connections.build(backend.connection)
    store = stores.SqlStore(backend.database or "")
    for i in range(200):
        push(queue, Tagged(new_tag(run_id, i), ms=10), queue_name)
    with procs.Pool(backend, [queue_name], history_dir, 2, "--sleep=0.5") as pool:
        terminated = 0
        for _ in range(10):
            time.sleep(0.5)  # the nemesis's pace
            history.record("fault.service.pg_terminate_backend", None)
            store.service_fault()
            terminated += 1
            pool.respawn()
        _run_until_drained(pool, store, queue_name, None)
        hung = _stop_all(pool)
    drain_s = procs.drain(queue, [queue_name], store)
    report = finish(
        "B3-pg-terminate-burst",
        backend.id,
        seed,
        history_dir,
        queue_name,
        store=store,
        drain_s=drain_s,
        extra={"terminations": terminated, "hung_workers": hung, "worker_exit_codes": sorted(set(pool.exits))},
    )
    if isinstance(queue, DisposableQueue):
        queue.dispose()
    assert report["lost"] == 0 and report["unexpected"] == 0 and report["executed_unique"] == 200
    assert report["store_remaining"] == 0 and report["stale_accepted"] == 0 and hung == []
