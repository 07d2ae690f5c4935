"""The give-back on shutdown (issue 27, item 15), on every backend that stores jobs: SIGTERM that comes while a
prefetch pop is in flight, before or after the store answered it, leaves no delivery reserved. Every job
that started is settled; every other one is poppable again at once, with its attempt number unchanged
where the backend gives back without charging one."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from kinetis_queue import dispatcher
from kinetis_queue.contracts import Queue, QueuedJob, Reserved
from kinetis_queue.worker import ExitReason, Worker
from tests import concurrency_jobs as cj
from tests.conformance.test_worker_concurrency import remaining, reserving_several

pytestmark = pytest.mark.trait("stores_jobs")


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    cj.reset()
    yield
    cj.RELEASE.set()


@pytest.mark.parametrize("moment", ["before-the-store-answers", "after-the-store-answers"])
@pytest.mark.parametrize("concurrency", [1, 8])
def test_sigterm_during_a_prefetch_pop_gives_back_every_delivery_not_started(
    connection: Queue,
    queue_name: str,
    outcomes: list,
    monkeypatch: pytest.MonkeyPatch,
    moment: str,
    concurrency: int,
) -> None:
    """Twelve jobs on one queue and a ninth... thirteenth on a second one; the third pop (a prefetch: jobs
    finished before it) has SIGTERM come while it is in flight."""
    monkeypatch.setattr(dispatcher, "PREFETCH_WINDOW", 600.0)  # prefetch = every job finished so far
    reserving_several(connection)
    second = f"{queue_name}-b"
    ids = {connection.push(cj.Started(f"a{index}"), queue=queue_name): f"a{index}" for index in range(12)}
    ids[connection.push(cj.Started("b"), queue=second)] = "b"
    pops = 0
    reserved: list[QueuedJob] = []
    pop_many = connection.pop_many

    def signalled(timeout: float, queues: Any, limit: int) -> Reserved:
        nonlocal pops
        pops += 1
        if pops == 3 and moment == "before-the-store-answers":
            os.kill(os.getpid(), signal.SIGTERM)
        found = pop_many(timeout, queues, limit)
        reserved.extend(found.jobs)
        if pops == 3 and moment == "after-the-store-answers":
            os.kill(os.getpid(), signal.SIGTERM)
        return found

    connection.pop_many = signalled  # type: ignore[method-assign]
    with Worker(connection, concurrency=concurrency) as worker:
        assert worker.run(5, [queue_name, second]) is ExitReason.SHUTDOWN
    started = set(cj.STARTED)
    assert pops >= 3 and worker.processed == len(started)
    assert [name for name, _ in outcomes] == ["job_succeeded"] * len(started)
    left = remaining(connection, queue_name) + remaining(connection, second)
    assert {ids[job.id] for job in left} == set(ids.values()) - started  # none lost, none still held
    if type(connection)._unreserve is not Queue._unreserve:
        assert {job.attempts for job in left} <= {1}  # given back, not left to its lease
