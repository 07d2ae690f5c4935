"""A1, kill storm: real queue_work processes SIGKILLed while they work (RELIABILITY.md §3 A1).

Contract: "At-least-once delivery" and "Reservation and recovery": a worker that dies mid-job
leaves its jobs to the backend's recovery, so nothing accepted is lost. Each kill can cost one extra
execution per delivery the worker held that had started: the jobs running (up to ``--concurrency``)
and those finished whose ack was still in the ack batch (kinetis_queue.worker.acks, at most a few ms).
Deliveries reserved ahead and not started are charged an attempt, never run twice. The scenario runs
at concurrency 1 in ``make test`` and at 8 in ``make storms``. The nemesis kills a worker at most every
``kill_every`` seconds, and only one that has finished its share of the round (``jobs / KILLS_PER_ROUND``):
about 20 kills a round on a quiet machine or a loaded one, each in the middle of a worker's work.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kinetis_queue.contracts import Queue
from kinetis_queue.job import Job
from kinetis_queue.worker.acks import MAX_ACK_BATCH
from tests.faults import history, procs
from tests.faults.conftest import soak_seconds
from tests.faults.harness import finish, push
from tests.faults.history import new_tag
from tests.faults.jobs import Tagged
from tests.support.backends import Backend

pytestmark = pytest.mark.trait("stores_jobs")

#: About how many kills a round gets: a worker is killed once it has finished its share of the round's jobs.
KILLS_PER_ROUND = 20


def _outstanding(store: Any, queue_name: str, history_dir: Path, pushed: int) -> bool:
    """Work left: a job not yet done by the history, or (when there is an adapter) a message the store still holds."""
    undone = len({e["tag"] for e in history.read(history_dir) if e["e"] == "exec.done"}) < pushed
    if store is not None:
        # A store's count can lag (SQS's approximate counts read 0 with messages in flight): both must agree.
        return undone or bool(store.remaining(queue_name))
    return undone


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
    concurrency: int = 1,
    job: Callable[[str, int], Job] = Tagged,
) -> dict[str, object]:
    rng = random.Random(seed)
    knobs = {} if visibility_timeout is None else {"visibility_timeout": visibility_timeout}
    started = time.monotonic()
    seq = 0
    share = max(1, jobs // KILLS_PER_ROUND)
    args = ("--sleep=0.5", f"--concurrency={concurrency}")

    def push_round() -> None:
        nonlocal seq
        for _ in range(jobs):
            push(connection, job(new_tag(run_id, seq), rng.randint(10, 50)), queue_name)
            seq += 1

    # The first round is pushed before the workers start, so the storm meets a full queue: where pushes are
    # slower than the workers (SQS on a loaded machine), a round pushed to running workers could be done
    # before the first kill (the CI failure of sqs-c8: no kill at all).
    push_round()
    with procs.Pool(backend, [queue_name], history_dir, workers, *args, **knobs) as pool:
        done_rounds = 0
        while done_rounds < rounds or time.monotonic() - started < duration:
            if done_rounds:
                push_round()
            deadline = time.monotonic() + 300
            kills = pool.kills
            # At least one kill per round, even when the workers finished the round first.
            while (outstanding := _outstanding(store, queue_name, history_dir, seq)) or pool.kills == kills:
                if time.monotonic() > deadline:
                    raise AssertionError(f"round {done_rounds + 1} was not done within 300 s ({pool.kills} kills)")
                time.sleep(kill_every)  # the nemesis's pace, not a wait for a condition
                targets = pool.working(share)
                if not targets and not outstanding:  # the round's one kill, on workers that found nothing left
                    targets = list(range(len(pool.processes)))
                if targets:
                    pool.kill(rng.choice(targets))
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
        extra={
            "kills": pool.kills,
            "unexpected_exits": unexpected_exits,
            "rounds": done_rounds,
            "concurrency": concurrency,
        },
    )
    assert report["attempted"] == report["acknowledged"] == seq
    assert report["lost"] == 0, report["lost_tags"]
    assert report["unexpected"] == 0
    # One running delivery plus one finished in its ack's flush window at concurrency 1; at N, N of
    # them running and at most an ack batch finished.
    per_kill = 2 if concurrency == 1 else concurrency + MAX_ACK_BATCH
    assert report["duplicated"] <= pool.kills * per_kill
    assert report["executed_unique"] == seq
    assert report["store_remaining"] in (0, None)
    assert report["worker_stops"] == 0 and unexpected_exits == []
    if backend.fenced:
        assert report["stale_accepted"] == 0
    return report


#: Concurrency 1 runs in ``make test`` on every row; 8 in ``make storms`` (issue 28: one concurrency proves the
#: point in the suite). At 8 the SQS rows spent about 200 s of a loaded run re-reading 1-second leases on moto
#: for 800 jobs, where concurrency 1 proves the same guarantee (nothing accepted is lost to a SIGKILL) in 40 s.
CONCURRENCIES = [pytest.param(1, id="c1"), pytest.param(8, id="c8", marks=pytest.mark.storm)]


@pytest.mark.fault
@pytest.mark.timeout(360)  # about 60 s on a quiet machine; a loaded one (CI beside other work) takes far longer
@pytest.mark.parametrize("concurrency", CONCURRENCIES)
def test_kill_storm_loses_nothing(
    concurrency: int,
    backend: Backend,
    connection: Queue,
    maybe_store: Any,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
) -> None:
    """CI: 200 jobs of 10-50 ms, 2 workers at concurrency 1, a SIGKILL at most every second (at concurrency 8:
    800 jobs, at most every half second), each of a worker that has done its share: lost 0, duplicates
    within what the killed workers held, store empty."""
    report = storm(
        "A1-kill-storm" if concurrency == 1 else f"A1-kill-storm-c{concurrency}",
        backend,
        connection,
        maybe_store,
        queue_name,
        history_dir,
        seed,
        run_id,
        # At 8 at once two workers run 200 such jobs in about 0.4 s, which a kill a second could miss
        # altogether (the CI failure of sqs-c8: no kill): 800 jobs, a kill every half second.
        jobs=200 if concurrency == 1 else 800,
        kill_every=1.0 if concurrency == 1 else 0.5,
        workers=2,
        concurrency=concurrency,
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
