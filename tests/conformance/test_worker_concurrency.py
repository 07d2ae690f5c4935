"""The worker at ``concurrency`` above 1, batched reservation and acks, async jobs (issue 14), on every
backend that stores jobs. The jobs meet through module state (tests/concurrency_jobs.py): the worker
runs in this process. No assertion here is about time: overlap is proven by a barrier.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kinetis_queue.contracts import JobSettlement, Queue, QueuedJob, RenewableQueue, Reserved
from kinetis_queue.exceptions import JobTimeoutError, MalformedJobSettledError
from kinetis_queue.models import FailedJob
from kinetis_queue.worker import ExitReason, JobOutcome, JobReport, Worker, dispatcher
from tests import concurrency_jobs as cj
from tests import jobs
from tests.support.backends import Backend
from tests.support.fixtures import rebuilt
from tests.support.helpers import steal_reservation, wait_until

pytestmark = pytest.mark.trait("stores_jobs")

#: The lease of this module's connections, in seconds: no test here is about leases, and each holds deliveries
#: while others start (a barrier, a prefetch). On the suite's one-second lease a loaded machine once let seven
#: of the eight barrier jobs' leases run out between two heartbeat renewals (sql-sqlite, whose writes queue
#: behind each other): they were taken back mid-attempt and their acks refused as stale.
LEASE = 60


@pytest.fixture
def connection(connection: Queue, request: pytest.FixtureRequest) -> Queue:
    """The row's connection with a lease of LEASE seconds, where it has a lease (tests.support.fixtures.rebuilt)."""
    return rebuilt(request, visibility_timeout=LEASE) if isinstance(connection, RenewableQueue) else connection


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    cj.reset()
    yield
    cj.RELEASE.set()  # a job still waiting in an abandoned thread ends now


def names(outcomes: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [name for name, _ in outcomes]


def remaining(connection: Queue, *queue_names: str) -> list[QueuedJob]:
    """Pop and ack every job left on the queues; the deliveries, as they came back. One pop over every
    queue, so the final empty look (a whole second) is paid once, not once per queue."""
    left = []
    while (job := connection.pop(1, list(queue_names))) is not None:
        connection.ack(job)
        left.append(job)
    return left


def reserving_several(connection: Queue) -> None:
    """Until this backend reserves several deliveries per call itself, sweep it up to ``limit`` times
    (real reservations on the real store) so the worker's prefetch has something to hold."""
    if type(connection)._sweep_many is not Queue._sweep_many:
        return

    def sweep_many(queues: tuple[str, ...], limit: int) -> Reserved:
        found = Reserved()
        for _ in range(limit):
            try:
                job = connection._sweep(queues)
            except MalformedJobSettledError as exc:
                found.malformed.append(exc)
                continue
            if job is None:
                break
            found.jobs.append(job)
        return found

    connection._sweep_many = sweep_many  # type: ignore[method-assign]


def test_jobs_run_at_once_up_to_the_concurrency(connection: Queue, queue_name: str, outcomes: list) -> None:
    """Eight jobs that each wait for the other seven at a barrier: they only end if they overlap."""
    for index in range(8):
        connection.push(cj.Meets(8, f"m{index}"), queue=queue_name)
    worker = Worker(connection, concurrency=8)
    try:
        # The last pop finds nothing and lasts its whole poll: 1 s, not 5 (the poll is not what is tested).
        assert worker.run(1, [queue_name], stop_when_empty=True) is ExitReason.EMPTY
    finally:
        worker.close()
    assert sorted(cj.STARTED) == sorted(f"m{index}" for index in range(8))
    assert names(outcomes) == ["job_succeeded"] * 8
    assert worker.processed == 8
    assert remaining(connection, queue_name) == []


def test_max_jobs_counts_deliveries_across_every_slot(connection: Queue, queue_name: str, outcomes: list) -> None:
    for index in range(12):
        connection.push(cj.Started(f"s{index}"), queue=queue_name)
    worker = Worker(connection, concurrency=8)
    try:
        assert worker.run(5, [queue_name], max_jobs=5) is ExitReason.MAX_JOBS
    finally:
        worker.close()
    assert len(cj.STARTED) == 5 and worker.processed == 5
    assert names(outcomes) == ["job_succeeded"] * 5
    left = remaining(connection, queue_name)
    assert len(left) == 7
    assert {job.attempts for job in left} == {1}  # never reserved past the limit


@pytest.mark.parametrize("concurrency", [1, 8])
def test_sigterm_lets_running_jobs_finish_and_gives_back_the_prefetched(
    connection: Queue,
    queue_name: str,
    outcomes: list,
    monkeypatch: pytest.MonkeyPatch,
    concurrency: int,
    backend: Backend,
) -> None:
    """The 10th job to start sends SIGTERM. Every job that started is settled; every delivery reserved
    ahead and not started goes back through unreserve() (same attempt number where the backend
    implements it) and never runs here."""
    monkeypatch.setattr(dispatcher, "PREFETCH_WINDOW", 600.0)  # prefetch = every job finished so far
    reserving_several(connection)
    given_back: list[QueuedJob] = []
    unreserve = connection.unreserve

    def spy(job: QueuedJob) -> None:
        given_back.append(job)
        unreserve(job)

    connection.unreserve = spy  # type: ignore[method-assign]
    reserved: list[QueuedJob] = []
    pop_many = connection.pop_many

    def reserving(timeout: float, queues: Any, limit: int) -> Reserved:
        found = pop_many(timeout, queues, limit)
        reserved.extend(found.jobs)
        return found

    connection.pop_many = reserving  # type: ignore[method-assign]
    ids = {connection.push(cj.StopsAt(10, f"j{index}"), queue=queue_name): f"j{index}" for index in range(40)}
    worker = Worker(connection, concurrency=concurrency)
    try:
        assert worker.run(5, [queue_name]) is ExitReason.SHUTDOWN
    finally:
        worker.close()
    started = set(cj.STARTED)
    assert len(started) >= 10 and worker.processed == len(started)
    assert names(outcomes) == ["job_succeeded"] * len(started)
    assert not {ids[job.id] for job in given_back} & started
    # Every delivery reserved and not started was given back.
    assert {ids[job.id] for job in reserved} - started == {ids[job.id] for job in given_back}
    if concurrency == 1 and backend.atomic_reserve:
        # Reservations of 1, 2, 4 then 8 (1 + the jobs finished): the 10th job ran with 5 held behind it.
        # (SQS may answer a receive with fewer messages than it holds, and RabbitMQ's pop_many() returns what
        # its consumer has received so far, which under load may be fewer than asked: they may hold fewer.)
        if backend.recovers_by == "connection":
            assert len(given_back) <= 5
        else:
            assert len(given_back) == 5
    left = remaining(connection, queue_name)
    assert {ids[job.id] for job in left} == set(ids.values()) - started
    if type(connection)._unreserve is not Queue._unreserve:
        assert {job.attempts for job in left} == {1}


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_timeout_off_the_main_thread_settles_the_delivery_and_abandons_its_thread(
    connection: Queue, queue_name: str, outcomes: list
) -> None:
    job_id = connection.push(cj.WaitsForRelease("w"), queue=queue_name, max_attempts=1)
    worker = Worker(connection, concurrency=8, job_timeout=0.5)
    try:
        assert worker.run(5, [queue_name], once=True) is ExitReason.COMPLETED
        # Settled as failed by the watchdog while handle() still waits for RELEASE in its thread.
        assert cj.WAITING.is_set() and cj.STARTED == []
        assert names(outcomes) == ["job_failed_permanently"]
        assert isinstance(outcomes[0][1]["exception"], JobTimeoutError)
        assert FailedJob.objects.get(job_id=job_id).exception_class == "kinetis_queue.exceptions.JobTimeoutError"
        assert worker.processed == 1
        cj.RELEASE.set()
        wait_until(lambda: cj.STARTED == ["w"])  # the thread ended; its result is discarded
    finally:
        worker.close()
    assert names(outcomes) == ["job_failed_permanently"]
    assert remaining(connection, queue_name) == []


def test_a_timed_out_job_with_attempts_left_is_released(connection: Queue, queue_name: str, outcomes: list) -> None:
    connection.push(cj.WaitsForRelease("w"), queue=queue_name, max_attempts=2)
    worker = Worker(connection, concurrency=2, job_timeout=0.5, retry_base_delay=0)
    try:
        assert worker.run(5, [queue_name], once=True) is ExitReason.COMPLETED
        assert names(outcomes) == ["job_released"]
        cj.RELEASE.set()
        wait_until(lambda: cj.STARTED == ["w"])
    finally:
        worker.close()
    (again,) = remaining(connection, queue_name)
    assert again.attempts == 2


def test_async_jobs_run_together_on_one_event_loop(connection: Queue, queue_name: str, outcomes: list) -> None:
    for index in range(4):
        connection.push(cj.AsyncMeets(4, f"a{index}"), queue=queue_name)
    worker = Worker(connection, concurrency=4)
    try:
        assert worker.run(1, [queue_name], stop_when_empty=True) is ExitReason.EMPTY  # 1 s: the last, empty pop
    finally:
        worker.close()
    assert names(outcomes) == ["job_succeeded"] * 4
    assert sorted(label for label, _, _ in cj.ASYNC_RAN) == ["a0", "a1", "a2", "a3"]
    assert {thread for _, thread, _ in cj.ASYNC_RAN} == {"kinetis-queue-event-loop"}
    assert len({loop for _, _, loop in cj.ASYNC_RAN}) == 1


@pytest.mark.parametrize("concurrency", [1, 8])
@pytest.mark.logs_errors("kinetis_queue.worker")
def test_an_async_job_past_its_timeout_is_cancelled(
    connection: Queue, queue_name: str, outcomes: list, concurrency: int
) -> None:
    connection.push(cj.AsyncSleeps(60, "late"), queue=queue_name, max_attempts=1)
    worker = Worker(connection, concurrency=concurrency, job_timeout=0.5)
    try:
        assert worker.run(5, [queue_name], once=True) is ExitReason.COMPLETED
    finally:
        worker.close()
    assert cj.STARTED == ["cancelled:late"]
    assert names(outcomes) == ["job_failed_permanently"]
    assert isinstance(outcomes[0][1]["exception"], JobTimeoutError)


@pytest.mark.trait("fenced")
@pytest.mark.parametrize("concurrency", [1, 8])
def test_a_deferred_ack_refused_as_stale_is_reported_lost(
    connection: Queue, queue_name: str, outcomes: list, backend: Backend, concurrency: int
) -> None:
    """The ack goes through ack_many(); its refusal takes the LOST path: signal, log and report."""
    job_id = connection.push(jobs.CallsBack(), queue=queue_name, max_attempts=1)
    jobs.CALLBACK[:] = [lambda context: steal_reservation(backend, context.id)]
    reports: list[JobReport] = []
    worker = Worker(connection, recorder=None, concurrency=concurrency, reporter=reports.append)
    try:
        assert worker.run(5, [queue_name], once=True) is ExitReason.COMPLETED
    finally:
        worker.close()
    assert names(outcomes) == ["job_settlement_lost"]
    assert outcomes[0][1]["operation"] is JobSettlement.ACK
    assert outcomes[0][1]["job"].id == job_id
    assert [(r.job_id, r.outcome) for r in reports] == [(job_id, JobOutcome.LOST)]


def test_the_context_reaches_an_async_handle(connection: Queue, queue_name: str, outcomes: list) -> None:
    connection.push(cj.AsyncMeets(1, "ctx"), queue=queue_name)
    worker = Worker(connection)
    try:
        assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()
    assert names(outcomes) == ["job_succeeded"]
    assert [label for label, _, _ in cj.ASYNC_RAN] == ["ctx"]


def test_concurrency_and_prefetch_are_checked() -> None:
    from kinetis_queue.exceptions import InvalidQueueArgumentError

    queue: Any = type("Q", (), {"connection": None})()  # never used: the arguments are checked first
    for bad in ({"concurrency": 0}, {"concurrency": 1.5}, {"prefetch": -1}, {"prefetch": True}):
        with pytest.raises(InvalidQueueArgumentError):
            Worker(queue, **bad)
