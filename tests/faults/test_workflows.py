"""Chains and batches under faults (issue 17, kinetis_queue/workflows), on every storing backend.

- A 200-member batch with an on_success callback, run by two workers at concurrency 4 while one is
  SIGKILLed every half second: every member ran at least once, none was lost, the callback ran to its
  end exactly once (a kill during its run may start it again: never two at once, never twice to the end).
- A chain of 6 members whose workers die (os._exit) at a crash point: after a member's end was written
  and before what it started was pushed (``workflow.finished``), and after the push, before the member's
  ack (``workflow.pushed``). The chain completes, each member at least once, in order, none skipped.
  (The order of writes puts the next member's push before the member's ack, so no point lies between an
  ack and the next push: see kinetis_queue/workflows/engine.py.)
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest

from kinetis_queue import batch, chain
from kinetis_queue.contracts import Queue
from kinetis_queue.workflows import WorkflowHandle
from kinetis_queue.workflows.engine import AFTER_FINISH, AFTER_PUSHES
from tests.faults import history, procs
from tests.faults.harness import finish
from tests.faults.history import new_tag
from tests.faults.jobs import Tagged
from tests.support.backends import Backend

pytestmark = [pytest.mark.fault, pytest.mark.trait("stores_jobs"), pytest.mark.timeout(240)]


def _acknowledge(tags: list[str], queue_name: str) -> None:
    """The members were accepted with the dispatch: what the checker counts as pushed."""
    for tag in tags:
        history.record("push.invoke", tag, queue=queue_name)
        history.record("push.ok", tag)


def _until_ended(handle: WorkflowHandle, *, callback: bool, deadline: float) -> dict[str, Any]:
    while time.monotonic() < deadline:
        status = handle.status()
        if status["state"] != "running" and (
            not callback or status["callbacks"].get("on_success") in ("succeeded", "failed")
        ):
            return status
        time.sleep(0.2)
    return handle.status()


@pytest.mark.storm
def test_a_batch_under_a_kill_storm_runs_every_member_and_its_callback_once(
    backend: Backend, connection: Queue, queue_name: str, history_dir: Path, run_id: str, seed: int
) -> None:
    rng = random.Random(seed)
    tags = [new_tag(run_id, n) for n in range(200)]
    callback = f"{run_id}-callback"
    connection.size(queue_name)  # SQS: the test's queue is created on first lookup
    handle = batch(
        [Tagged(tag, ms=rng.randint(5, 30)) for tag in tags],
        on_success=Tagged(callback, ms=50),
        queue=queue_name,
        connection=backend.connection,
    )
    _acknowledge(tags, queue_name)
    kills = 0
    with procs.Pool(backend, [queue_name], history_dir, 2, "--sleep=0.5", "--concurrency=4") as pool:
        deadline = time.monotonic() + 180
        while handle.status()["state"] == "running" and time.monotonic() < deadline:
            time.sleep(0.5)  # the nemesis's pace, not a wait for a condition
            pool.kill(rng.randrange(len(pool.processes)))
            kills += 1
            pool.respawn()
        status = _until_ended(handle, callback=True, deadline=time.monotonic() + 90)
    events = history.read(history_dir)
    report = finish("workflow-batch-kill-storm", backend.id, seed, history_dir, queue_name, extra={"kills": kills})
    callback_starts = sum(1 for e in events if e["e"] == "exec.start" and e["tag"] == callback)
    callback_ends = sum(1 for e in events if e["e"] == "exec.done" and e["tag"] == callback)
    print(
        f"\n[{backend.id}] batch of 200 under {kills} kills: members attempted {report['attempted']}, executed "
        f"{report['executed_unique']}, executions {report['executions']}, lost {report['lost']}; callback started "
        f"{callback_starts}, ran to its end {callback_ends}"
    )
    assert kills >= 2
    assert status["state"] == "succeeded" and status["succeeded"] == 200, status
    assert report["lost"] == 0, report["lost_tags"]
    assert report["executed_unique"] == 200 + 1  # the members, and the callback (pushed by the batch itself)
    assert callback_ends == 1
    assert status["callbacks"]["on_success"] == "succeeded"


@pytest.mark.parametrize("point", [AFTER_FINISH, AFTER_PUSHES])
def test_a_chain_whose_workers_die_between_its_writes_completes_in_order(
    backend: Backend, connection: Queue, queue_name: str, history_dir: Path, run_id: str, point: str
) -> None:
    tags = [new_tag(run_id, n) for n in range(6)]
    connection.size(queue_name)
    handle = chain([Tagged(tag) for tag in tags], queue=queue_name, connection=backend.connection)
    _acknowledge(tags, queue_name)
    crashes = 0
    # The first worker dies at its 2nd reach of the point; its replacements run without the crash point.
    worker = procs.spawn(backend, [queue_name], history_dir, "--sleep=0.5", crashpoint=f"{point}:2")
    try:
        assert worker.wait(120) == 137
        crashes += 1
        with procs.Pool(backend, [queue_name], history_dir, 1, "--sleep=0.5"):
            status = _until_ended(handle, callback=False, deadline=time.monotonic() + 150)
    finally:
        procs.stop(worker)
    events = history.read(history_dir)
    report = finish(f"workflow-chain-{point}", backend.id, 0, history_dir, queue_name, extra={"crashes": crashes})
    first_start = {tag: min(e["mono"] for e in events if e["e"] == "exec.start" and e["tag"] == tag) for tag in tags}
    first_done = {tag: min(e["mono"] for e in events if e["e"] == "exec.done" and e["tag"] == tag) for tag in tags}
    print(
        f"\n[{backend.id} {point}] chain of 6: executions {report['executions']}, "
        f"executed {report['executed_unique']}, lost {report['lost']}, state {status['state']}"
    )
    assert status["state"] == "succeeded", status
    assert report["executed_unique"] == 6 and report["lost"] == 0
    assert all(first_start[tags[n + 1]] > first_done[tags[n]] for n in range(5))  # in order, none skipped
