"""G2/G3/G5, pop races beyond G1 (RELIABILITY.md §3 G): isolation levels, priority under contention, MariaDB.

G3: the G1 load (2 processes x 4 threads popping and acking at once, VT 60 s) on PostgreSQL with the
connection run at READ COMMITTED (CI) and at SERIALIZABLE (soak). ``KQ_ISOLATION_LEVEL`` makes the
poppers set both the alias's ``OPTIONS['isolation_level']`` and the session default
(tests/faults/worker.py ``isolation_options``): Django's option alone reaches only ``atomic()`` blocks,
while a server or role default reaches every statement, the claim included. Found here: at
SERIALIZABLE, about half of 400 concurrent SKIP LOCKED claims and some fenced DELETEs failed with
serialization errors, which stopped the poppers (nothing was lost: each failed statement wrote
nothing). The worker's own connection now runs at READ COMMITTED whatever the alias or server says
(kinetis_queue/backends/sql/queue.py), and a CI check below pins that.

G2 (soak): a backlog on ``high,default,low`` plus continuous pushes, 4 popping threads: a pop never
returns a lower queue's job while a higher queue holds a job nobody is popping. G5 (soak): the G1
load on MariaDB, and a receipt whose token differs only in case is stale (F3 covers it in CI too).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connections as db_connections

from kinetis_queue.backends.sql import SqlQueue
from kinetis_queue.contracts import Queue
from kinetis_queue.exceptions import StaleJobHandleError
from tests.faults import history, procs, stores
from tests.faults.conftest import soak_scale, soak_seconds
from tests.faults.harness import finish, push
from tests.faults.history import new_tag
from tests.faults.jobs import Tagged
from tests.faults.worker import isolation_options
from tests.support.backends import BACKENDS, Backend
from tests.support.popper import take

pytestmark = pytest.mark.trait("stores_jobs")


def _only(backend_id: str) -> pytest.MarkDecorator:
    """Parametrize the ``connection`` fixture with one backend (no skipped rows for the others)."""
    return pytest.mark.parametrize(
        "connection", [b for b in BACKENDS if b.id == backend_id], indirect=True, ids=lambda b: b.id
    )


def _expire_reservations(database: str, queue: str) -> None:
    """A popper that stopped on an error may hold a delivery for the 60 s VT: let the drain reclaim it now."""
    with db_connections[database].cursor() as cursor:
        cursor.execute(
            "UPDATE kinetis_queue_jobs SET reserved_at = reserved_at - 86400 "
            "WHERE queue = %s AND reserved_at IS NOT NULL",
            [queue],
        )


def popper_race(
    scenario: str,
    backend: Backend,
    connection: Queue,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
    *,
    jobs: int,
    isolation: str | None = None,
) -> dict[str, Any]:
    """The G1 load: ``jobs`` ready jobs, 2 popper processes x 4 threads (tests/support/popper.py), then a drain."""
    for i in range(jobs):
        push(connection, Tagged(new_tag(run_id, i)), queue_name)
    env = procs.env(history_dir, visibility_timeout=60, role="popper")
    if isolation:
        env["KQ_ISOLATION_LEVEL"] = isolation
    command = [sys.executable, "-m", "tests.support.popper", backend.connection, queue_name, "4"]
    started = time.monotonic()
    with (history_dir / "poppers.log").open("wb") as log:
        poppers = [subprocess.Popen(command, env=env, cwd=procs.ROOT, stdout=log, stderr=log) for _ in range(2)]
        codes = [popper.wait(timeout=600) for popper in poppers]
    elapsed = time.monotonic() - started
    store = stores.store_for(backend, connection)
    if backend.database is not None:
        _expire_reservations(backend.database, queue_name)
    drain_s = procs.drain(connection, [queue_name], store)

    events = history.read(history_dir)
    pops = [e["tag"] for e in events if e["e"] == "pop"]
    errors = sorted({str(e.get("error")) for e in events if e["e"] == "worker.stop"})
    report = finish(
        scenario,
        backend.id,
        seed,
        history_dir,
        queue_name,
        store=store,
        drain_s=drain_s,
        extra={
            "isolation": isolation,
            "double_deliveries": len(pops) - len(set(pops)),
            "pops": len(pops),
            "pops_per_s": round(len(pops) / elapsed),
            "popper_exits": codes,
            "popper_errors": errors,
        },
    )
    assert report["double_deliveries"] == 0, "a job was reserved by two poppers at once"
    assert report["lost"] == 0 and report["unexpected"] == 0 and report["executed_unique"] == jobs
    assert report["store_remaining"] == 0
    assert codes == [0, 0] and report["worker_stops"] == 0, f"poppers stopped on {errors}"
    return report


# -- G3: PostgreSQL isolation levels ---------------------------------------------------------------


@pytest.mark.fault
@pytest.mark.timeout(180)
@_only("sql-postgres")
def test_read_committed_poppers_never_share_a_delivery(
    backend: Backend, connection: Queue, queue_name: str, history_dir: Path, seed: int, run_id: str
) -> None:
    """G3 (CI): the G1 load with every popper connection at READ COMMITTED."""
    popper_race(
        "G3-isolation-read-committed",
        backend,
        connection,
        queue_name,
        history_dir,
        seed,
        run_id,
        jobs=400,
        isolation="read committed",
    )


@pytest.mark.fault
@pytest.mark.timeout(120)
@_only("sql-postgres")
def test_a_serializable_alias_still_claims_at_read_committed(
    backend: Backend, connection: Queue, queue_name: str, history_dir: Path, seed: int, run_id: str
) -> None:
    """G3 (CI, small): an alias whose connections run SERIALIZABLE; 4 threads of one SqlQueue race over 200 jobs.

    The alias's setting does reach a plain connection (checked), but the worker's own connection claims
    and settles at READ COMMITTED, so no claim or ack fails with a serialization error.
    """
    assert backend.database is not None
    shared = db_connections[backend.database]
    for i in range(200):
        push(connection, Tagged(new_tag(run_id, i)), queue_name)
    saved = shared.settings_dict["OPTIONS"]
    shared.settings_dict["OPTIONS"] = {**saved, **isolation_options(shared.settings_dict["ENGINE"], "serializable")}
    queue = SqlQueue(database=backend.database, visibility_timeout=60)
    try:
        plain = type(shared)({**shared.settings_dict}, backend.database)
        try:
            with plain.cursor() as cursor:
                cursor.execute("SHOW transaction_isolation")
                assert cursor.fetchone()[0] == "serializable", "the alias's setting did not reach its connections"
        finally:
            plain.close()
        popped: list[str] = []
        errors: list[str] = []

        def pop_until_empty(barrier: threading.Barrier) -> None:
            barrier.wait()
            try:
                with queue._worker_db().cursor() as cursor:
                    cursor.execute("SHOW transaction_isolation")
                    assert cursor.fetchone()[0] == "read committed"
                while (job := take(queue, [queue_name], 0.5)) is not None:
                    popped.append(job.args["tag"])
            except BaseException as exc:
                errors.append(f"{type(exc).__name__}: {exc}"[:200])

        barrier = threading.Barrier(4)
        threads = [threading.Thread(target=pop_until_empty, args=(barrier,)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=90)
    finally:
        shared.settings_dict["OPTIONS"] = saved
        queue.dispose()
    report = finish(
        "G3-isolation-serializable-alias",
        backend.id,
        seed,
        history_dir,
        queue_name,
        store=stores.store_for(backend, connection),
        extra={
            "isolation": "serializable (alias and session default)",
            "pops": len(popped),
            "double_deliveries": len(popped) - len(set(popped)),
            "popper_errors": errors,
        },
    )
    assert errors == []
    assert len(popped) == len(set(popped)) == 200
    assert report["store_remaining"] == 0


@pytest.mark.soak
@pytest.mark.timeout(int(soak_seconds()) + 900)
@_only("sql-postgres")
def test_serializable_poppers_never_share_a_delivery_soak(
    backend: Backend, connection: Queue, queue_name: str, history_dir: Path, seed: int, run_id: str
) -> None:
    """G3 (soak): the G1 load (2000 jobs) with every popper connection at SERIALIZABLE."""
    popper_race(
        "G3-isolation-serializable-soak",
        backend,
        connection,
        queue_name,
        history_dir,
        seed,
        run_id,
        jobs=2000,
        isolation="serializable",
    )


# -- G5: MariaDB -----------------------------------------------------------------------------------


@pytest.mark.soak
@pytest.mark.timeout(int(soak_seconds()) + 900)
@_only("sql-mariadb")
def test_mariadb_poppers_and_case_only_tokens_soak(
    backend: Backend, connection: Queue, queue_name: str, history_dir: Path, seed: int, run_id: str
) -> None:
    """G5 (soak): the G1 load (2000 jobs) on MariaDB; a token differing only in case is stale (``ascii_bin``)."""
    assert backend.database is not None
    store = stores.SqlStore(backend.database)
    own = queue_name + "-case"
    connection.push(Tagged("case-token"), queue=own)  # not in the history: this one is no part of the race
    live = connection.pop(5, [own])
    assert live is not None
    before = store.snapshot(own)
    for forged_token in (live.handle.token.upper(), live.handle.token.swapcase()):
        forged = dataclasses.replace(live, handle=live.handle._replace(token=forged_token))
        with pytest.raises(StaleJobHandleError):
            connection.ack(forged)
        assert store.snapshot(own) == before
    connection.ack(live)
    assert store.remaining(own) == 0
    popper_race(
        "G5-mariadb-poppers-soak",
        backend,
        connection,
        queue_name,
        history_dir,
        seed,
        run_id,
        jobs=2000,
        isolation="read committed",
    )


# -- G2: priority under contention -----------------------------------------------------------------


@pytest.mark.soak
@pytest.mark.timeout(int(soak_seconds()) + 900)
def test_priority_holds_under_contention_soak(
    backend: Backend,
    long_lease: Queue,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
    request: pytest.FixtureRequest,
) -> None:
    """G2 (soak): 200 jobs backlogged per queue, then pushes to all three for up to a minute, 4 popping threads.

    An inversion is a pop that returned a lower queue's job although a higher queue held a job pushed
    before the pop began and claimed only by a pop that began after it ended. R, Q and M sweep in list
    order within one probe: 0 inversions. SQS (a long poll per queue, best-effort) is reported only.
    The visibility timeout is an hour, so a slow ack never meets a reclaimed lease.
    """
    if backend.id == "sql-mariadb":
        request.applymarker(
            pytest.mark.xfail(
                strict=False,
                reason=(
                    "MariaDB 10.11: a few pops (3 in about 2,400) skip a committed, unlocked job of a higher queue, "
                    "claimed a few ms later; reported, cause not found"
                ),
            )
        )
    if backend.setup is not None:  # SQS: create this test's queues on first use; RabbitMQ: delete them after
        request.getfixturevalue(backend.setup).prepare(long_lease)
    names = [f"{queue_name}-high", f"{queue_name}-default", f"{queue_name}-low"]
    rank = {name: i for i, name in enumerate(names)}
    pushed: dict[str, tuple[int, float]] = {}
    lock = threading.Lock()
    seq = iter(range(10**9))

    def push_one(name: str) -> None:
        tag = new_tag(run_id, next(seq))
        if push(long_lease, Tagged(tag), name) is not None:
            with lock:
                pushed[tag] = (rank[name], time.monotonic())

    for _ in range(200):
        for name in names:
            push_one(name)
    pops: list[tuple[float, float, str]] = []  # (start, end, tag)
    stop_pushing = threading.Event()
    errors: list[str] = []

    def pusher() -> None:
        deadline = time.monotonic() + max(10.0, 60 * soak_scale())
        try:
            while time.monotonic() < deadline:
                for name in names:
                    push_one(name)
                time.sleep(0.01)
        finally:
            stop_pushing.set()
            db_connections.close_all()  # push() on SQL opened this thread's own Django connection

    def popper() -> None:
        empty = 0
        try:
            while empty < 3 or not stop_pushing.is_set():
                start = time.monotonic()
                job = take(long_lease, names, 0.5)
                end = time.monotonic()
                if job is None:
                    empty += 1
                    continue
                empty = 0
                with lock:
                    pops.append((start, end, job.args["tag"]))
        except BaseException as exc:
            errors.append(f"{type(exc).__name__}: {exc}"[:200])

    threads = [threading.Thread(target=pusher)] + [threading.Thread(target=popper) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    popped_by = {tag: start for start, _, tag in pops}
    # Per queue, by push time: the latest start of the pop that claimed any job pushed so far.
    timeline: list[tuple[list[float], list[float]]] = []
    for level in range(len(names)):
        jobs = sorted((at, popped_by.get(tag, float("inf"))) for tag, (lvl, at) in pushed.items() if lvl == level)
        timeline.append(([at for at, _ in jobs], list(itertools.accumulate((c for _, c in jobs), max))))
    inversions: list[dict[str, Any]] = []
    for start, end, tag in pops:
        for level in range(pushed[tag][0]):  # a higher queue's job pushed before this pop began ...
            times, latest_claim = timeline[level]
            index = bisect.bisect_left(times, start)
            if index and latest_claim[index - 1] > end:  # ... and claimed only by a pop begun after it ended
                inversions.append(
                    {
                        "pop_s": round(end - start, 4),
                        "got": names[pushed[tag][0]][-4:],
                        "waiting": names[level][-4:],
                        "claimed_after_s": round(latest_claim[index - 1] - end, 4),
                    }
                )
                break
    low_waits = [popped_by[tag] - at for tag, (level, at) in pushed.items() if level == 2 and tag in popped_by]
    report = finish(
        "G2-priority-soak",
        backend.id,
        seed,
        history_dir,
        names[0],
        extra={
            "pops": len(pops),
            "pushed": len(pushed),
            "priority_inversions": len(inversions),
            "inversion_examples": inversions[:5],
            "max_wait_low_s": round(max(low_waits), 2) if low_waits else None,
            "popper_errors": errors,
        },
    )
    assert errors == []
    assert len(popped_by) == len(pushed) and report["lost"] == 0, "a pushed job was never popped"
    if backend.atomic_reserve:
        assert inversions == []
