"""Unique jobs under concurrency and kills (issue 15, kinetis_queue.unique), on every storing backend.

- 8 processes push one key 1,000 times each at once: one job is held, every push got its id; once it
  settled, the next push is a new job.
- A kill storm over unique jobs: nothing lost (the kill storm's checker), and afterwards no key is still
  held: a push of every key is a new job.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kinetis_queue.contracts import Queue
from kinetis_queue.worker import Worker
from tests.faults import procs
from tests.faults.jobs import UniqueTagged
from tests.faults.test_kill_storm import storm
from tests.support.backends import Backend

pytestmark = [pytest.mark.fault, pytest.mark.trait("stores_jobs")]

PUSHERS = 8
PUSHES = 1000


@pytest.mark.storm
@pytest.mark.timeout(240)
def test_eight_processes_pushing_one_key_hold_one_job(
    backend: Backend, connection: Queue, queue_name: str, tmp_path: Path, run_id: str
) -> None:
    tag = f"{run_id}-one"
    assert connection.size(queue_name) == 0  # SQS: the test's queue is created on first lookup
    start = tmp_path / "start"
    env = {**procs.env(tmp_path), "KQ_START": str(start)}
    command = [sys.executable, "-m", "tests.faults.unique_pusher", backend.connection, queue_name, tag, str(PUSHES)]
    pushers = [
        subprocess.Popen(command, env=env, cwd=procs.ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(PUSHERS)
    ]
    start.touch()
    outputs = [pusher.communicate(timeout=200) for pusher in pushers]
    assert [pusher.returncode for pusher in pushers] == [0] * PUSHERS, [err.decode()[-2000:] for _, err in outputs]
    ids = {line for out, _ in outputs for line in out.decode().split()}

    size = connection.size(queue_name)
    print(f"\n[{backend.id}] {PUSHERS} x {PUSHES} pushes of one key: {len(ids)} job id(s), {size} job(s) stored")
    assert len(ids) == 1
    assert size == 1
    (holder,) = ids

    worker = Worker(connection, recorder=None)
    try:
        assert worker.process_next(10, [queue_name]) is True
    finally:
        worker.close()
    assert connection.size(queue_name) == 0
    again = connection.push(UniqueTagged(tag), queue=queue_name)
    assert again != holder
    assert connection.push(UniqueTagged(tag), queue=queue_name) == again


@pytest.mark.storm
@pytest.mark.timeout(300)
def test_a_kill_storm_over_unique_jobs_loses_none_and_leaves_no_key_held(
    backend: Backend,
    connection: Queue,
    maybe_store: Any,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
) -> None:
    report = storm(
        "unique-kill-storm",
        backend,
        connection,
        maybe_store,
        queue_name,
        history_dir,
        seed,
        run_id,
        jobs=200,
        kill_every=0.5,
        workers=2,
        job=UniqueTagged,
    )
    tags = sorted({event["tag"] for event in _pushes(history_dir)})
    first_ids = {event["tag"]: event["job_id"] for event in _pushes(history_dir)}
    again = {tag: connection.push(UniqueTagged(tag, 0), queue=queue_name) for tag in tags}

    held = [tag for tag in tags if again[tag] == first_ids[tag]]
    print(
        f"\n[{backend.id}] unique kill storm: {report['kills']} kills, lost {report['lost']}, "
        f"duplicated {report['duplicated']}, keys still held {len(held)}"
    )
    assert report["kills"] >= 1
    assert held == []
    procs.drain(connection, [queue_name], maybe_store)


def _pushes(history_dir: Path) -> list[dict[str, Any]]:
    from tests.faults import history

    return [event for event in history.read(history_dir) if event["e"] == "push.ok"]
