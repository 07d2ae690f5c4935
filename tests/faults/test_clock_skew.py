"""D1/D2/D3, clock skew of a whole process with libfaketime (RELIABILITY.md §3 D).

Contract, "Delayed jobs": Redis and SQL delays are written with the pushing process's clock and
compared against the popping worker's; SQL's ``reserved_at`` is the worker's ``time()`` ("Backend
mechanisms: SQL"), so skew between hosts shifts when a delay ends and when a reservation looks
expired. What must hold besides: nothing is lost, and a premature reclaim's late settlement is fenced.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kinetis_queue.contracts import Queue
from tests.faults import history, procs, stores
from tests.faults.harness import finish, push
from tests.faults.history import new_tag
from tests.faults.jobs import Held
from tests.support.backends import BACKENDS, Backend
from tests.support.helpers import wait_until

pytestmark = [
    pytest.mark.fault,
    pytest.mark.trait("stores_jobs"),
    pytest.mark.timeout(120),
    pytest.mark.skipif(not procs.FAKETIME_LIBS, reason="libfaketime missing: scripts/system-deps.sh installs it"),
]

DELAY = 5


@pytest.mark.parametrize("skew", [20, -20], ids=lambda s: f"pusher{s:+d}s")
def test_pusher_skew_moves_a_delay_by_the_pushers_clock(
    backend: Backend, connection: Queue, queue_name: str, history_dir: Path, seed: int, run_id: str, skew: int
) -> None:
    """D1: the due time is the pusher's clock + delay; with -20 s > the 5 s delay the job runs at once."""
    store: Any = stores.store_for(backend, connection)
    if not hasattr(store, "due_at"):
        pytest.skip(f"{backend.id}: delays are not scored with the pusher's clock (or no store adapter yet)")
    tag = new_tag(run_id, 0)
    before = time.time()
    pusher = subprocess.run(
        [sys.executable, "-m", "tests.faults.pusher", backend.connection, queue_name, tag, str(DELAY)],
        env=procs.env(history_dir, faketime=f"{skew:+d}s", role="pusher"),
        cwd=procs.ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    after = time.time()
    pusher_clock = float(pusher.stdout.split()[0])
    assert before + skew - 1 <= pusher_clock <= after + skew + 1, "libfaketime did not skew the pusher"
    shift = store.due_at(queue_name) - DELAY - (before + after) / 2
    assert abs(shift - skew) <= 1 + (after - before) / 2

    runs_at_once = -skew > DELAY  # the delay's floor breaks against real time: the contract's documented skew
    if not runs_at_once:
        assert connection.pop(0.5, [queue_name]) is None  # late by the skew, never early
        store.make_due(queue_name)  # then nothing is lost: bring it due and drain
    drain_s = procs.drain(connection, [queue_name], store)
    report = finish(
        f"D1-pusher-skew{skew:+d}s",
        backend.id,
        seed,
        history_dir,
        queue_name,
        store=store,
        drain_s=drain_s,
        extra={"skew_s": skew, "measured_shift_s": round(shift, 2), "ran_at_once": runs_at_once},
    )
    assert report["lost"] == 0 and report["executed_unique"] == 1 and report["store_remaining"] == 0


def test_worker_skew_against_sql_reservations(
    backend: Backend, connection: Queue, queue_name: str, history_dir: Path, seed: int, run_id: str
) -> None:
    """D2: holder A unskewed, worker B at +δ, VT 4 s (renewal every 2 s), jobs held until the test ends them.

    δ = 1 s stays under VT/2 headroom: no reclaim while B polls beside A for a whole VT. δ = 30 s makes A's
    renewed reservation look expired to B: B reclaims while A still runs, the job runs twice, A's ack is
    refused as stale, and nothing is lost. The jobs run until B is up and (δ = 30 s) has taken its job over:
    a job of a fixed length ended before a B slow to start under load was polling.
    """
    if backend.database is None:
        pytest.skip(f"{backend.id}: reservations do not use the worker's clock")
    store = stores.SqlStore(backend.database)
    cases = {1: (queue_name, new_tag(run_id, 1)), 30: (queue_name + "s30", new_tag(run_id, 30))}
    release = history_dir / "release"
    holders = []
    for name, tag in cases.values():
        push(connection, Held(tag, str(release)), name)
        holders.append(procs.spawn(backend, [name], history_dir, "--once", "--sleep=5", visibility_timeout=4))
    started = {tag for _, tag in cases.values()}
    wait_until(lambda: started <= {e["tag"] for e in history.read(history_dir) if e["e"] == "exec.start"}, 60)
    skewed = [
        procs.spawn(backend, [name], history_dir, "--once", "--sleep=10", visibility_timeout=4, faketime=f"+{delta}s")
        for delta, (name, _) in cases.items()
    ]
    for process in skewed:
        wait_until(
            lambda p=process: any(e["e"] == "worker.ready" and e["pid"] == p.pid for e in history.read(history_dir)), 60
        )
    reclaimer = skewed[1].pid
    wait_until(lambda: any(e["e"] == "exec.start" and e["pid"] == reclaimer for e in history.read(history_dir)), 60)
    time.sleep(4)  # B at +1 s polls beside A's renewed lease for a whole VT: an absence, nothing to await
    release.touch()
    assert [p.wait(timeout=60) for p in holders + skewed] == [0, 0, 0, 0]
    for name, _ in cases.values():
        procs.drain(connection, [name], store)

    events = history.read(history_dir)
    figures = {
        f"{delta}s": {
            "executions": sum(1 for e in events if e["e"] == "exec.start" and e["tag"] == tag),
            "stale_rejected": sum(1 for e in events if e["e"].endswith(".stale") and e["tag"] == tag),
            "remaining": store.remaining(name),
        }
        for delta, (name, tag) in cases.items()
    }
    report = finish(
        "D2-worker-skew", backend.id, seed, history_dir, queue_name, store=store, extra={"per_skew": figures}
    )
    assert figures["1s"] == {"executions": 1, "stale_rejected": 0, "remaining": 0}
    assert figures["30s"] == {"executions": 2, "stale_rejected": 1, "remaining": 0}
    assert report["lost"] == 0 and report["stale_accepted"] == 0 and report["unexpected"] == 0


@pytest.mark.parametrize("connection", [b for b in BACKENDS if b.id == "redis"], indirect=True, ids=lambda b: b.id)
def test_worker_skew_against_redis_leases(
    backend: Backend, connection: Queue, queue_name: str, history_dir: Path, seed: int, run_id: str
) -> None:
    """D3: workers at +1 h and -1 h, VT 2 s (renewal every 1 s), jobs held past 3 x VT: no reclaim while alive.

    Contract, "Reservation and recovery": a Redis lease expires by Redis ``TIME``, so a worker's own clock
    never makes a live lease look expired. One holder per skew runs a job while one competitor per skew
    polls the same queue: had a lease been scored with a worker's clock, the competitor an hour ahead of the
    -1 h holder would reclaim its job at once. The jobs run until both competitors are up and have polled
    beside them for 3 x VT: a job of a fixed length could end before a competitor slow to start under load
    was polling (then the competitor, stopped while it started, died of the SIGTERM and proved nothing).
    """
    store = stores.store_for(backend, connection)
    skews = {"+3600s": new_tag(run_id, 1), "-3600s": new_tag(run_id, 2)}
    release = history_dir / "release"
    for tag in skews.values():
        push(connection, Held(tag, str(release)), queue_name)
    holders = [
        procs.spawn(backend, [queue_name], history_dir, "--once", "--sleep=5", visibility_timeout=2, faketime=skew)
        for skew in skews
    ]
    started = set(skews.values())
    wait_until(lambda: started <= {e["tag"] for e in history.read(history_dir) if e["e"] == "exec.start"}, 60)
    competitors = [
        procs.spawn(backend, [queue_name], history_dir, "--sleep=0.5", visibility_timeout=2, faketime=skew)
        for skew in skews
    ]
    try:
        for process in competitors:
            wait_until(
                lambda p=process: any(
                    e["e"] == "worker.ready" and e["pid"] == p.pid for e in history.read(history_dir)
                ),
                60,
            )
        time.sleep(6)  # both competitors poll beside the live leases for 3 x VT: an absence, nothing to await
        release.touch()
        assert [p.wait(timeout=60) for p in holders] == [0, 0]
    finally:
        release.touch()
        exits = [procs.stop(p) for p in competitors]
    drain_s = procs.drain(connection, [queue_name], store)

    events = history.read(history_dir)
    starts = [e for e in events if e["e"] == "exec.start" and e["tag"] in started]
    reclaims = sum(1 for e in starts if e.get("attempt") != 1)
    report = finish(
        "D3-worker-skew-redis",
        backend.id,
        seed,
        history_dir,
        queue_name,
        store=store,
        drain_s=drain_s,
        extra={
            "per_skew": {
                skew: {"executions": sum(1 for e in starts if e["tag"] == tag)} for skew, tag in skews.items()
            },
            "reclaims_while_alive": reclaims,
        },
    )
    assert exits == [0, 0]
    assert reclaims == 0 and report["executions"] == 2 and report["overlapping_live_leases"] == 0
    assert report["stale_rejected"] == 0 and report["lost"] == 0 and report["store_remaining"] == 0
