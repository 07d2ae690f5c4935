"""The give-back on shutdown (issue 27, item 15), on every backend that stores jobs: SIGTERM that comes while a
prefetch pop is in flight, before or after the store answered it, leaves no delivery reserved. Every job
that started is settled; every other one is poppable again at once, with its attempt number unchanged
where the backend gives back without charging one."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from kinetis_queue.contracts import Queue, QueuedJob, Reserved
from kinetis_queue.worker import ExitReason, Worker, dispatcher
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
        # A short poll: at concurrency 8 the third pop finds the queues empty, and the stop waits it out.
        assert worker.run(0.5, [queue_name, second]) is ExitReason.SHUTDOWN
    started = set(cj.STARTED)
    assert pops >= 3 and worker.processed == len(started)
    assert [name for name, _ in outcomes] == ["job_succeeded"] * len(started)
    left = remaining(connection, queue_name, second)
    assert {ids[job.id] for job in left} == set(ids.values()) - started  # none lost, none still held
    if type(connection)._unreserve is not Queue._unreserve:
        assert {job.attempts for job in left} <= {1}  # given back, not left to its lease


@pytest.mark.parametrize("moment", ["before-the-store-answers", "after-the-store-answers"])
def test_sigterm_during_the_give_back_of_a_delivery_held_too_long_leaves_none_reserved(
    connection: Queue, queue_name: str, outcomes: list, monkeypatch: pytest.MonkeyPatch, moment: str
) -> None:
    """Both slots run jobs waiting for RELEASE while a delivery reserved ahead waits for a slot; past
    PREFETCH_HOLD the pool gives it back, and SIGTERM comes during that unreserve(). Every job that started
    is settled; every other one is poppable at once, none charged an attempt."""
    monkeypatch.setattr(dispatcher, "PREFETCH_WINDOW", 600.0)  # prefetch = every job finished so far
    monkeypatch.setattr(dispatcher, "PREFETCH_HOLD", 0.3)
    reserving_several(connection)
    # Reservations: 2 (the free slots) = w1, x; then, x done, 1 free slot + 1 finished = w2 and z0, which waits.
    names = ["w1", "x", "w2", "z0", "z1", "z2"]
    jobs = [cj.WaitsForRelease("w1"), cj.Started("x"), cj.WaitsForRelease("w2")]
    pushed = connection.push_many([*jobs, *(cj.Started(f"z{index}") for index in range(3))], queue=queue_name)
    ids = dict(zip(pushed, names, strict=True))
    unreserve = connection.unreserve
    given_back: list[QueuedJob] = []

    def signalled(job: QueuedJob, delay: float = 0) -> None:
        if moment == "before-the-store-answers":
            os.kill(os.getpid(), signal.SIGTERM)
        unreserve(job, delay)
        given_back.append(job)
        if moment == "after-the-store-answers":
            os.kill(os.getpid(), signal.SIGTERM)
        cj.RELEASE.set()  # the running jobs end once the signal came

    connection.unreserve = signalled  # type: ignore[method-assign]
    with Worker(connection, concurrency=2, prefetch=4) as worker:
        # Where a store hands the jobs out in another order and nothing waits, no give-back comes: the
        # worker is then stopped after the bound, and the check of given_back below fails (no hang).
        fallback = threading.Timer(cj.BOUND, worker.stop)
        fallback.start()
        try:
            assert worker.run(5, [queue_name]) is ExitReason.SHUTDOWN
        finally:
            fallback.cancel()
    started = set(cj.STARTED)
    assert given_back, "no delivery waited for a slot past PREFETCH_HOLD"
    assert worker.processed == len(started) and not {ids[job.id] for job in given_back} & started
    assert [name for name, _ in outcomes] == ["job_succeeded"] * len(started)
    left = remaining(connection, queue_name)
    assert {ids[job.id] for job in left} == set(names) - started  # none lost, none still held
    if type(connection)._unreserve is not Queue._unreserve:
        assert {job.attempts for job in left} == {1}  # given back, not left to its lease


def test_sigterm_while_a_pool_thread_starts_gives_back_every_delivery_not_handed_to_a_slot(
    connection: Queue, queue_name: str, outcomes: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM comes while the third slot's thread starts (its delivery already handed to the pool): that
    delivery runs and is settled; every delivery reserved and not handed to a slot is poppable at once."""
    monkeypatch.setattr(dispatcher, "PREFETCH_WINDOW", 600.0)
    reserving_several(connection)
    second = f"{queue_name}-b"
    ids = {connection.push(cj.Started(f"a{index}"), queue=queue_name): f"a{index}" for index in range(12)}
    ids[connection.push(cj.Started("b"), queue=second)] = "b"
    starts = 0
    real_thread = threading.Thread

    class SignallingThread(real_thread):  # type: ignore[misc,valid-type]
        def start(self) -> None:
            nonlocal starts
            if self.name.startswith("kinetis-queue-job-"):
                starts += 1
                if starts == 3:
                    os.kill(os.getpid(), signal.SIGTERM)
            super().start()

    monkeypatch.setattr(threading, "Thread", SignallingThread)
    with Worker(connection, concurrency=8) as worker:
        assert worker.run(5, [queue_name, second]) is ExitReason.SHUTDOWN
    started = set(cj.STARTED)
    assert len(started) >= 3 and worker.processed == len(started)
    assert [name for name, _ in outcomes] == ["job_succeeded"] * len(started)
    left = remaining(connection, queue_name, second)
    assert {ids[job.id] for job in left} == set(ids.values()) - started  # none lost, none still held
    if type(connection)._unreserve is not Queue._unreserve:
        assert {job.attempts for job in left} <= {1}
