"""A1, kill storm: real queue_work processes SIGKILLed while they work (RELIABILITY.md §3 A1).

Contract: "At-least-once delivery" and "Reservation and recovery": a worker that dies mid-job
leaves its job to the backend's recovery, so nothing accepted is lost; each kill can cost at most
one extra execution, since a worker holds at most one delivery.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest

from kinetis_queue.contracts import Queue
from tests.faults import history, procs
from tests.faults.conftest import soak_seconds
from tests.faults.harness import finish, push
from tests.faults.history import new_tag
from tests.faults.jobs import Tagged
from tests.support.backends import Backend

pytestmark = pytest.mark.trait("stores_jobs")


def _outstanding(store: Any, queue_name: str, history_dir: Path, pushed: int) -> bool:
    """Work left: from the store when there is an adapter, else from the history (jobs not yet done)."""
    if store is not None:
        return bool(store.remaining(queue_name))
    return len({e["tag"] for e in history.read(history_dir) if e["e"] == "exec.done"}) < pushed


def storm(
    scenario: str,
    backend: Backend,
    connection: Queue,
    store: Any,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
    *,
    jobs: int,
    kill_every: float,
    workers: int,
    rounds: int = 1,
    duration: float = 0,
    visibility_timeout: int | None = None,
) -> dict[str, object]:
    rng = random.Random(seed)
    knobs = {} if visibility_timeout is None else {"visibility_timeout": visibility_timeout}
    started = time.monotonic()
    seq = 0
    with procs.Pool(backend, [queue_name], history_dir, workers, "--sleep=0.5", **knobs) as pool:
        done_rounds = 0
        while done_rounds < rounds or time.monotonic() - started < duration:
            for _ in range(jobs):
                push(connection, Tagged(new_tag(run_id, seq), ms=rng.randint(10, 50)), queue_name)
                seq += 1
            deadline = time.monotonic() + 300
            while _outstanding(store, queue_name, history_dir, seq) and time.monotonic() < deadline:
                time.sleep(kill_every)  # the nemesis's pace, not a wait for a condition
                pool.kill(rng.randrange(len(pool.processes)))
                pool.respawn()
            done_rounds += 1
    unexpected_exits = pool.unexpected_exits()
    drain_s = procs.drain(connection, [queue_name], store)
    report = finish(
        scenario,
        backend.id,
        seed,
        history_dir,
        queue_name,
        store=store,
        drain_s=drain_s,
        extra={"kills": pool.kills, "unexpected_exits": unexpected_exits, "rounds": done_rounds},
    )
    assert report["attempted"] == report["acknowledged"] == seq
    assert report["lost"] == 0, report["lost_tags"]
    assert report["unexpected"] == 0
    assert report["duplicated"] <= pool.kills
    assert report["executed_unique"] == seq
    assert report["store_remaining"] in (0, None)
    assert report["worker_stops"] == 0 and unexpected_exits == []
    if backend.fenced:
        assert report["stale_accepted"] == 0
    return report


@pytest.mark.fault
@pytest.mark.timeout(240)
def test_kill_storm_loses_nothing(
    backend: Backend,
    connection: Queue,
    maybe_store: Any,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
) -> None:
    """CI: 200 jobs of 10-50 ms, 2 workers, one SIGKILL a second: lost 0, duplicates <= kills, store empty."""
    report = storm(
        "A1-kill-storm",
        backend,
        connection,
        maybe_store,
        queue_name,
        history_dir,
        seed,
        run_id,
        jobs=200,
        kill_every=1.0,
        workers=2,
    )
    assert report["kills"] >= 1


@pytest.mark.soak
@pytest.mark.timeout(int(soak_seconds()) + 900)
def test_kill_storm_soak(
    backend: Backend,
    connection: Queue,
    maybe_store: Any,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
) -> None:
    """Soak: rounds of 1000 jobs, 2 workers, a SIGKILL every 200 ms, VT 2 s, for KQ_SOAK_SECONDS."""
    storm(
        "A1-kill-storm-soak",
        backend,
        connection,
        maybe_store,
        queue_name,
        history_dir,
        seed,
        run_id,
        jobs=1000,
        kill_every=0.2,
        workers=2,
        duration=soak_seconds(),
        visibility_timeout=2,
    )
