"""G1/G4, concurrent poppers: 2 processes x 4 threads pop and ack at once (RELIABILITY.md §3 G1, G4).

Contract: "At-least-once delivery": Redis, SQL and RabbitMQ reserve in one atomic step, so two
workers popping at the same instant never receive the same delivery (on SQLite: the guarded
UPDATE). SQS's visibility timeout is best-effort: there a double delivery is counted and reported.
The visibility timeout is 60 s here, so no reservation can legitimately expire during the run.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from kinetis_queue.contracts import Queue
from tests.faults import history, procs, stores
from tests.faults.harness import finish, push
from tests.faults.history import new_tag
from tests.faults.jobs import Tagged
from tests.support.backends import Backend

pytestmark = [pytest.mark.fault, pytest.mark.trait("stores_jobs"), pytest.mark.timeout(180)]

JOBS = 400


def test_concurrent_poppers_never_share_a_delivery(
    backend: Backend, connection: Queue, queue_name: str, history_dir: Path, seed: int, run_id: str
) -> None:
    for i in range(JOBS):
        push(connection, Tagged(new_tag(run_id, i)), queue_name)
    command = [sys.executable, "-m", "tests.support.popper", backend.connection, queue_name, "4"]
    started = time.monotonic()
    poppers = [
        subprocess.Popen(command, env=procs.env(history_dir, visibility_timeout=60, role="popper"), cwd=procs.ROOT)
        for _ in range(2)
    ]
    codes = [popper.wait(timeout=150) for popper in poppers]
    elapsed = time.monotonic() - started

    pops = [e["tag"] for e in history.read(history_dir) if e["e"] == "pop"]
    double = len(pops) - len(set(pops))
    store = stores.store_for(backend, connection)
    report = finish(
        "G1-concurrent-poppers",
        backend.id,
        seed,
        history_dir,
        queue_name,
        store=store,
        extra={"double_deliveries": double, "pops": len(pops), "pops_per_s": round(len(pops) / elapsed)},
    )
    if backend.atomic_reserve:
        assert double == 0, "a job was reserved by two poppers at once"
    assert codes == [0, 0] and report["worker_stops"] == 0
    assert report["lost"] == 0 and report["unexpected"] == 0 and report["executed_unique"] == JOBS
    if backend.atomic_reserve:
        assert store is None or report["store_remaining"] == 0
    # SQS (best-effort visibility): a message whose delete raced a receive can outlive it and wait out its
    # visibility timeout to be delivered again; every job ran (lost 0 above), and what is left is reported.
