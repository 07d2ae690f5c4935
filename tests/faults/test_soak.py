"""The composite nemesis (RELIABILITY.md §4.2): one soak run per backend, Jepsen-style.

Four real workers (through a fault proxy where the backend has a server) and one pusher at about
20 jobs/s; every 5-15 s one fault from the catalogue: SIGKILL, SIGSTOP for 2 x VT then SIGCONT,
SIGTERM, a worker restarted under libfaketime (+3 s), a service fault (PostgreSQL:
pg_terminate_backend of this run's worker sessions), a proxy reset, a 3 s blackhole (then a reset,
since nothing bounds a PostgreSQL call), 100 +/- 50 ms of latency for 5 s. Then heal, drain, check.

Pass: lost 0, unexpected 0, stale accepted 0 on a fenced backend, the store empty after the drain.
Workers stopped by a transport error are counted (contract: a settlement's transport error stops
the worker) and replaced.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.db import connections as db_connections

from kinetis_queue.contracts import Queue
from tests.faults import history, procs
from tests.faults.conftest import soak_seconds
from tests.faults.faultproxy import Blackhole, FaultProxy, Latency, Pass, Reset
from tests.faults.harness import finish, push
from tests.faults.history import new_tag
from tests.faults.jobs import Tagged
from tests.support.backends import Backend

pytestmark = [pytest.mark.soak, pytest.mark.trait("stores_jobs"), pytest.mark.timeout(int(soak_seconds()) + 900)]

VT = 2
RATE = 20


class Pusher(threading.Thread):
    """Pushes tagged jobs at about RATE per second until stopped."""

    def __init__(self, queue: Queue, queue_name: str, run_id: str, seed: int) -> None:
        super().__init__(name="soak-pusher", daemon=True)
        self.queue, self.queue_name, self.run_id = queue, queue_name, run_id
        self.rng = random.Random(seed + 1)
        self.halt = threading.Event()
        self.pushed = 0

    def run(self) -> None:
        try:
            while not self.halt.wait(1 / RATE):
                push(
                    self.queue, Tagged(new_tag(self.run_id, self.pushed), ms=self.rng.randint(10, 50)), self.queue_name
                )
                self.pushed += 1
        finally:
            db_connections.close_all()


def _catalogue(
    pool: procs.Pool, proxy: FaultProxy | None, store: Any, rng: random.Random
) -> dict[str, Callable[[], None]]:
    def pick() -> int:
        return rng.randrange(len(pool.processes))

    def stop_cont() -> None:
        process = pool.processes[pick()]
        history.record("fault.sigstop", None, target=process.pid)
        process.send_signal(signal.SIGSTOP)
        time.sleep(2 * VT)
        process.send_signal(signal.SIGCONT)

    def skewed_restart() -> None:
        pool.kill(pick(), signal.SIGTERM)
        history.record("fault.skewed_restart", None, skew="+3s")
        pool.processes.append(
            procs.spawn(pool.backend, pool.queues, pool.history_dir, *pool.args, **{**pool.knobs, "faketime": "+3s"})
        )

    faults: dict[str, Callable[[], None]] = {
        "kill": lambda: pool.kill(pick()) and None,
        "stop_cont": stop_cont,
        "term": lambda: pool.kill(pick(), signal.SIGTERM) and None,
        "skewed_restart": skewed_restart,
    }
    if store.service_fault() is not None:  # probe once: None means this backend has none
        faults["service"] = lambda: history.record("fault.service", None, what=store.service_fault())
    if proxy is not None:

        def reset() -> None:
            proxy.set(Reset())
            time.sleep(0.2)
            proxy.set(Pass())

        def blackhole() -> None:
            proxy.set(Blackhole())
            time.sleep(3)
            reset()

        def latency() -> None:
            proxy.set(Latency(100, 50))
            time.sleep(5)
            proxy.set(Pass())

        faults.update(reset=reset, blackhole=blackhole, latency=latency)
    return faults


def test_composite_nemesis(
    backend: Backend, connection: Queue, store: Any, queue_name: str, history_dir: Path, seed: int, run_id: str
) -> None:
    rng = random.Random(seed)
    target = store.server()
    proxy = FaultProxy(*target, seed=seed) if target is not None else None
    if proxy is not None:
        proxy.start()
    knobs: dict[str, Any] = {"visibility_timeout": VT, **({"port": proxy.port} if proxy is not None else {})}
    pusher = Pusher(connection, queue_name, run_id, seed)
    applied: dict[str, int] = {}
    try:
        with procs.Pool(backend, [queue_name], history_dir, 4, "--sleep=0.5", **knobs) as pool:
            faults = _catalogue(pool, proxy, store, rng)
            pusher.start()
            deadline = time.monotonic() + soak_seconds()
            while time.monotonic() < deadline:
                time.sleep(rng.uniform(5, 15))  # the nemesis's pace
                name = rng.choice(sorted(faults))
                faults[name]()
                applied[name] = applied.get(name, 0) + 1
                pool.respawn()  # workers stopped by a fault (or by a transport error) are replaced
            pusher.halt.set()
            pusher.join(timeout=60)
            if proxy is not None:
                proxy.set(Pass())
    finally:
        pusher.halt.set()
        if proxy is not None:
            proxy.close()
    drain_s = procs.drain(connection, [queue_name], store, timeout=300)
    report = finish(
        "composite-nemesis-soak",
        backend.id,
        seed,
        history_dir,
        queue_name,
        store=store,
        drain_s=drain_s,
        extra={
            "faults": applied,
            "duration_s": soak_seconds(),
            "kills": pool.kills,
            "worker_exit_codes": sorted(set(pool.exits)),
        },
    )
    assert report["attempted"] == pusher.pushed
    assert report["lost"] == 0, report["lost_tags"]
    assert report["unexpected"] == 0
    assert report["store_remaining"] == 0
    if backend.fenced:
        assert report["stale_accepted"] == 0
