"""A2, the crash-point matrix: a worker dies at each step between pop and settlement (RELIABILITY.md §3 A2).

A real queue_work runs with ``KQ_CRASHPOINT`` set and ends with ``os._exit(137)`` at that point;
a fresh worker then drains the queue. Contract: "At-least-once delivery" (never lost), "Reservation
and recovery" (redelivered by the backend's recovery) and "Recording a job before fail()" (a job
given up on is held by the backend, recorded, or both, never neither).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from kinetis_queue import crashpoints
from kinetis_queue.contracts import Queue, RenewableQueue
from kinetis_queue.job import Job
from tests.faults import procs
from tests.faults.harness import finish, push
from tests.faults.history import new_tag
from tests.faults.jobs import CrashesInHandle, FailsFirstRun, Tagged, TaggedFails
from tests.support.backends import Backend

pytestmark = [pytest.mark.fault, pytest.mark.trait("stores_jobs"), pytest.mark.timeout(90)]


@dataclass(frozen=True)
class Cell:
    point: str
    #: exec.start events over both deliveries.
    executions: int
    #: handle() runs that returned.
    completed: int
    #: FailedJob records the job ends with.
    records: int = 0
    max_attempts: int | None = None
    #: The one backend id the point exists on (None: every backend).
    only: str | None = None


CELLS = [
    # Crashed before the job ran: the redelivery is its only execution.
    Cell("after_pop", executions=1, completed=1),
    # Crashed mid-handle: run again to completion.
    Cell("in_handle", executions=2, completed=1),
    # The work completed, the ack never happened: it runs twice (the handler's idempotency is the guard).
    Cell("after_handle", executions=2, completed=2),
    # Recorded, not failed: the backend delivers it again, and that delivery is recorded too.
    Cell("after_record", executions=2, completed=0, records=2, max_attempts=1),
    # Died right after a renewal returned: the lease runs out one window later and the job runs again.
    Cell("after_renew_sent", executions=2, completed=1),
    # RabbitMQ's release() died between the replacement's confirm and the original's reject: the broker
    # requeues the original (attempts unchanged) beside the replacement, and both run and settle.
    Cell("rmq_after_release_confirm", executions=3, completed=2, max_attempts=3, only="rabbitmq"),
]


def _job(cell: Cell, tag: str, visibility_timeout: int) -> Job:
    if cell.point == "in_handle":
        return CrashesInHandle(tag)
    if cell.point == "after_record":
        return TaggedFails(tag)
    if cell.point == "after_renew_sent":
        return Tagged(tag, ms=int(visibility_timeout * 1500))  # outlives VT/2, when the first renewal runs
    if cell.point == "rmq_after_release_confirm":
        return FailsFirstRun(tag)  # the crashing run raises, so the worker releases it
    return Tagged(tag)


@pytest.mark.parametrize("concurrency", [1, 8], ids=["c1", "c8"])
@pytest.mark.parametrize("cell", CELLS, ids=lambda c: c.point)
@pytest.mark.logs_errors("kinetis_queue.worker")  # cells that fail a job for good, and the drain's worker logs it
def test_a_crash_at_any_point_loses_nothing(
    concurrency: int,
    backend: Backend,
    connection: Queue,
    maybe_store: object,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
    cell: Cell,
) -> None:
    if cell.only is not None and backend.id != cell.only:
        pytest.skip(f"{cell.point} is a {cell.only} crash point")
    if cell.point == "after_renew_sent" and not isinstance(connection, RenewableQueue):
        pytest.skip(f"{backend.id} is not a RenewableQueue: there is no renewal to crash after")
    vt = connection.visibility_timeout() if isinstance(connection, RenewableQueue) else 1
    tag = new_tag(run_id, 0)
    assert push(connection, _job(cell, tag, vt), queue_name, max_attempts=cell.max_attempts) is not None

    crashing = procs.spawn(
        backend,
        [queue_name],
        history_dir,
        "--once",
        "--sleep=10",
        f"--concurrency={concurrency}",  # at 8 the job runs in a pool thread, its ack through the batch
        crashpoint=cell.point,
    )
    assert crashing.wait(timeout=60) == crashpoints.EXIT_CODE, "the worker did not reach the crash point"
    drain_s = procs.drain(connection, [queue_name], maybe_store)

    report = finish(
        f"A2-crash-{cell.point}" + ("" if concurrency == 1 else f"-c{concurrency}"),
        backend.id,
        seed,
        history_dir,
        queue_name,
        store=maybe_store,
        drain_s=drain_s,
        extra={"crash_point": cell.point, "concurrency": concurrency},
    )
    assert report["lost"] == 0
    assert report["executions"] == cell.executions
    assert report["executed_unique"] == (1 if cell.completed else 0)
    assert report["completions"] == cell.completed
    assert report["failed_records"] == cell.records
    assert report["store_remaining"] in (0, None)
    if backend.fenced:
        assert report["stale_accepted"] == 0
