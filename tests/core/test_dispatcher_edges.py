"""The worker's reserving loop (kinetis_queue.worker.dispatcher) at its edges, on the SQLite queue in this
process: stop_when_empty while a job may still release a retry, a prefetched delivery given back when
no slot frees, a give-back refused as stale when the worker stops, an error met while every slot is
busy, and the prefetch bookkeeping of a worker without prefetch. No assertion here is about time."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import connections as db_connections

from kinetis_queue import Job, JobContext, conf, queues
from kinetis_queue import connections as queue_connections
from kinetis_queue.contracts import DisposableQueue, Queue, QueuedJob, Reserved
from kinetis_queue.outcomes import ExitReason
from kinetis_queue.worker import JobReport, Worker, dispatcher
from kinetis_queue.worker.acks import AckBatch
from kinetis_queue.worker.dispatcher import Dispatcher
from tests import concurrency_jobs as cj
from tests import jobs
from tests.support.helpers import wait_until

#: Set once the worker's reservation came back empty (see watch_empty_pops).
EMPTY_POP = threading.Event()


class FailsOnceAfterAnEmptyPop(Job):
    """The first attempt waits (bounded) until the worker's loop saw an empty queue, then fails; the
    retry succeeds. Records each attempt in cj.STARTED."""

    def handle(self, context: JobContext) -> None:
        cj.STARTED.append(f"attempt {context.attempts}")
        if context.attempts == 1:
            assert EMPTY_POP.wait(cj.BOUND), "the worker never popped an empty queue"
            raise RuntimeError("first attempt fails")


@dataclass
class StealsTheOthersAndStops(Job):
    """Makes every other reserved delivery of its queue stale (a reclaim by another worker), then sends
    this process SIGTERM (the worker's stop)."""

    label: str

    def handle(self, context: JobContext) -> None:
        with db_connections["default"].cursor() as cursor:
            cursor.execute(
                "UPDATE kinetis_queue_jobs SET reserved_token = %s"
                " WHERE queue = %s AND job_id <> %s AND reserved_token IS NOT NULL",
                ["f" * 32, context.queue, context.id],
            )
            cj.STARTED.append(f"{self.label} stole {cursor.rowcount}")
        os.kill(os.getpid(), signal.SIGTERM)


class StoreDown:
    """A failed-job recorder whose store is down: the settlement of a failed job raises."""

    def record(self, *args: Any) -> None:
        raise OSError("failed-job store is down")


#: The lease of the module's queue: these tests hold deliveries (waiting in slots, reserved ahead) for as long as a
#: loaded machine makes them, and none of them is about a lease running out. On the suite's one second, a waiting
#: job's lease ran out under load and its redelivery took the place of the delivery the test watched (a CI rerun
#: of test_a_prefetched_delivery_no_slot_takes_is_given_back_and_runs_later_unchanged).
LEASE = 60


@pytest.fixture
def queue() -> Iterator[Queue]:
    """The SQLite connection with a lease no test here outlives (LEASE)."""
    leased = queue_connections.build_from(
        dataclasses.replace(conf.connection_settings("sqlite"), visibility_timeout=LEASE)
    )
    yield leased
    if isinstance(leased, DisposableQueue):
        leased.dispose()


@pytest.fixture
def expiring() -> Queue:
    """The suite's SQLite connection (a one-second lease), for a test that waits for a lease to run out."""
    return queues["sqlite"]


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    cj.reset()
    EMPTY_POP.clear()
    yield
    cj.RELEASE.set()  # a job still waiting in an abandoned thread ends now


def watch_empty_pops(queue: Queue) -> list[int]:
    """Set EMPTY_POP when the worker's pop_many() comes back empty; the limits it asked for."""
    pop_many = queue.pop_many
    limits: list[int] = []

    def spy(timeout: float, names: Any, limit: int) -> Reserved:
        limits.append(limit)
        reserved = pop_many(timeout, names, limit)
        if not reserved:
            EMPTY_POP.set()
        return reserved

    queue.pop_many = spy  # type: ignore[method-assign]
    return limits


@pytest.fixture
def spied(queue: Queue) -> Iterator[Queue]:
    yield queue
    for name in ("pop_many", "unreserve"):
        queue.__dict__.pop(name, None)


def test_stop_when_empty_waits_for_a_running_job_that_may_release_a_retry(spied: Queue, queue_name: str) -> None:
    """An empty pop while a job runs is not "empty" yet: the job's release brings its retry back, and
    the worker runs it before it stops."""
    watch_empty_pops(spied)
    job_id = spied.push(FailsOnceAfterAnEmptyPop(), queue=queue_name, max_attempts=2)
    reports: list[JobReport] = []
    worker = Worker(spied, recorder=None, concurrency=2, retry_base_delay=0, reporter=reports.append)
    try:
        assert worker.run(0.2, [queue_name], stop_when_empty=True) is ExitReason.EMPTY
    finally:
        worker.close()
    assert cj.STARTED == ["attempt 1", "attempt 2"]
    assert [(r.job_id, r.attempt, r.outcome) for r in reports] == [(job_id, 1, "released"), (job_id, 2, "succeeded")]
    assert spied.size(queue_name) == 0


@pytest.mark.parametrize("load", ["quiet", "starved"])
def test_a_prefetched_delivery_no_slot_takes_is_given_back_and_runs_later_unchanged(
    spied: Queue, queue_name: str, monkeypatch: pytest.MonkeyPatch, load: str
) -> None:
    """Both slots wait for RELEASE while a delivery reserved ahead waits for a slot: past PREFETCH_HOLD
    it goes back with unreserve() (same attempt number), and runs once a slot frees. Also on a machine so
    loaded (``starved``) that the heartbeat renews nothing and the give-back comes 1.5 s late: on the suite's
    one-second lease a waiting job's lease ran out and its redelivery took the watched delivery's place."""
    monkeypatch.setattr(dispatcher, "PREFETCH_WINDOW", 600.0)  # prefetch = every job finished so far
    monkeypatch.setattr(dispatcher, "PREFETCH_HOLD", 0.3)
    starved = load == "starved"
    if starved:
        monkeypatch.setattr(spied, "renew", lambda job: None)
    given_back: list[QueuedJob] = []
    unreserve = spied.unreserve

    def spy(job: QueuedJob) -> None:
        if starved:
            time.sleep(1.5)
        unreserve(job)
        given_back.append(job)
        cj.RELEASE.set()  # the slots free only once something was given back

    spied.unreserve = spy  # type: ignore[method-assign]
    # Reservations: 2 (the free slots) = w1, x; then, x done, 1 free slot + 1 finished = w2, z0.
    spied.push_many([cj.WaitsForRelease("w1"), cj.Started("x"), cj.WaitsForRelease("w2")], queue=queue_name)
    later = spied.push_many([cj.Started(f"z{index}") for index in range(4)], queue=queue_name)
    reports: list[JobReport] = []
    worker = Worker(spied, recorder=None, concurrency=2, prefetch=4, reporter=reports.append)
    try:
        assert worker.run(0.2, [queue_name], stop_when_empty=True) is ExitReason.EMPTY
    finally:
        worker.close()
    assert given_back[0].id == later[0] and {job.attempts for job in given_back} == {1}
    assert sorted(cj.STARTED) == ["w1", "w2", "x", "z0", "z1", "z2", "z3"]
    # Each ran once, at attempt 1: a give-back charges no attempt.
    assert sorted((r.attempt, r.outcome) for r in reports) == [(1, "succeeded")] * 7
    assert spied.size(queue_name) == 0


def test_a_freed_slot_counts_for_the_next_prefetch_before_its_ack_is_reported(
    queue: Queue, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the prefetch counted a finished job only once the ack thread reported its ack, which could come
    after the reservation that waited for its slot; that reservation then reserved nothing ahead (a CI rerun of
    the test above: no delivery waited, nothing was given back). A job counts as soon as its slot is free."""
    monkeypatch.setattr(dispatcher, "PREFETCH_WINDOW", 600.0)
    queue.push(jobs.Noop(), queue=queue_name)
    job = queue.pop(1, [queue_name])
    assert job is not None
    worker = Worker(queue, recorder=None)
    loop = Dispatcher(worker, worker._runner, 2, 4)
    # Wired as run() wires it, with an ack batch that sends only when flushed (at the wind-down).
    loop.acks = worker._runner.acks = AckBatch(queue, max_delay=3600)
    worker._runner.settled = loop._settled
    try:
        loop._dispatch(job)
        wait_until(lambda: not loop.busy())
        assert loop._prefetch_size() == 1  # its ack is still waiting to be sent
    finally:
        loop._wind_down()
        worker.close()
    assert queue.pop(0.1, [queue_name]) is None  # acked at the wind-down


def test_a_give_back_refused_as_stale_at_the_stop_is_logged_and_the_worker_stops(
    expiring: Queue, queue_name: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """At concurrency 1 the reservations hold 1, 2 then 4 deliveries (1 + the jobs finished): the
    stealer runs with three reserved behind it, whose reservations it makes stale before it stops the
    worker. Their unreserve() is refused; the worker logs each and stops cleanly."""
    monkeypatch.setattr(dispatcher, "PREFETCH_WINDOW", 600.0)
    expiring.push_many([cj.Started(f"n{index}") for index in range(3)], queue=queue_name)
    expiring.push(StealsTheOthersAndStops("stealer"), queue=queue_name)
    behind = expiring.push_many([cj.Started(f"z{index}") for index in range(3)], queue=queue_name)
    worker = Worker(expiring, recorder=None, prefetch=8)
    with caplog.at_level(logging.WARNING, logger="kinetis_queue"):
        try:
            assert worker.run(1, [queue_name]) is ExitReason.SHUTDOWN
        finally:
            worker.close()
    assert cj.STARTED == ["n0", "n1", "n2", "stealer stole 3"]
    refused = [r for r in caplog.records if "unreserve() was refused as stale" in r.getMessage()]
    assert sorted(r.job_id for r in refused) == sorted(behind)  # type: ignore[attr-defined]
    # Stolen, not given back: they come back when the thief's lease expires, as new attempts.
    again = [expiring.pop(10, [queue_name]) for _ in behind]
    assert sorted((job.id, job.attempts) for job in again if job is not None) == sorted((i, 2) for i in behind)
    assert expiring.ack_many([job for job in again if job is not None]) == [None, None, None]


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_an_error_met_while_every_slot_is_busy_stops_the_loop(expiring: Queue, queue_name: str) -> None:
    """Both slots hold a job past its --timeout; the watchdog's settlement meets a recorder whose store
    is down. The main thread, waiting for a free slot, raises it instead of waiting on."""
    ids = {expiring.push(cj.WaitsForRelease(label), queue=queue_name, max_attempts=1) for label in ("a", "b")}
    worker = Worker(expiring, recorder=StoreDown(), concurrency=2, job_timeout=0.3)
    try:
        with pytest.raises(OSError, match="failed-job store is down"):
            worker.run(1, [queue_name])
        assert cj.STARTED == []  # raised while both jobs still wait in their slots
        assert worker.exit_reason is ExitReason.ERROR
        cj.RELEASE.set()
        wait_until(lambda: len(cj.STARTED) == 2)  # the abandoned threads ended; nothing was settled
    finally:
        worker.close()
    # Unsettled: both come back once their leases expire.
    again = [expiring.pop(10, [queue_name]) for _ in ids]
    assert {job.id for job in again if job is not None} == ids
    expiring.ack_many([job for job in again if job is not None])


def test_the_first_error_of_a_slot_is_the_one_raised(queue: Queue) -> None:
    worker = Worker(queue, recorder=None, concurrency=2)
    loop = Dispatcher(worker, worker._runner, 2, 0)
    loop._failed(OSError("first"))
    loop._failed(OSError("second"))
    with pytest.raises(OSError, match="first"):
        loop._raise_errors()
    loop._raise_errors()  # reported once
    worker.close()


def test_without_prefetch_a_worker_keeps_no_record_of_finished_jobs(
    spied: Queue, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: at --prefetch 0 the record of finished jobs (what sizes the prefetch) was appended to
    for every job and never pruned, so a long-running worker grew without bound. Each reservation asks
    for the free slot only."""
    monkeypatch.setattr(dispatcher, "PREFETCH_WINDOW", 600.0)
    limits = watch_empty_pops(spied)
    recorded: list[int] = []
    jobs.CALLBACK[:] = [lambda context: recorded.append(len(worker._dispatcher._finished))]  # type: ignore[union-attr]
    spied.push_many([jobs.Noop() for _ in range(5)] + [jobs.CallsBack()], queue=queue_name)
    worker = Worker(spied, recorder=None, prefetch=0)
    try:
        assert worker.run(0.2, [queue_name], stop_when_empty=True) is ExitReason.EMPTY
    finally:
        worker.close()
    assert worker.processed == 6
    assert recorded == [0]
    assert set(limits) == {1}


@dataclass
class RecordsWhatIsHeld(Job):
    """Records, from inside its attempt, which jobs of its queue are still stored and which reserved."""

    label: str

    def handle(self, context: JobContext) -> None:
        with db_connections["default"].cursor() as cursor:
            cursor.execute(
                "SELECT job_id, reserved_token IS NOT NULL FROM kinetis_queue_jobs WHERE queue = %s", [context.queue]
            )
            HELD.update({job_id: bool(reserved) for job_id, reserved in cursor.fetchall()})


#: What RecordsWhatIsHeld saw: job id -> reserved.
HELD: dict[str, bool] = {}


def test_a_redelivery_starts_only_after_the_acks_are_sent_and_the_prefetch_given_back(
    queue: Queue, queue_name: str
) -> None:
    """A redelivery may kill its worker (a poison pill): when it starts, the success before it is acked
    and the delivery reserved ahead of it is back in the queue (same attempt), so the crash costs neither."""
    HELD.clear()
    done_id, pill_id, ahead_id = queue.push_many(
        [cj.Started("done"), RecordsWhatIsHeld("pill"), cj.Started("ahead")], queue=queue_name
    )
    done, pill, ahead = queue.pop_many(0, [queue_name], 3).jobs
    assert [done.id, pill.id, ahead.id] == [done_id, pill_id, ahead_id]
    worker = Worker(queue, recorder=None)
    loop = Dispatcher(worker, worker._runner, 1, 4)
    try:
        loop.acks.add(done, lambda refused: None)  # as after its success: the ack deferred
        loop._waiting.append((ahead, 0.0))  # reserved ahead, waiting for the slot
        loop._dispatch(dataclasses.replace(pill, attempts=2))
    finally:
        loop.acks.close()
        worker.close()
    assert HELD == {pill_id: True, ahead_id: False}  # done acked, ahead given back, only the pill held
    given_back = queue.pop(0, [queue_name])
    assert given_back is not None and (given_back.id, given_back.attempts) == (ahead_id, 1)


def test_a_redelivery_in_a_pool_gives_back_only_the_deliveries_beyond_the_free_slots(
    queue: Queue, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At concurrency 4 with five redeliveries waiting, the one starting keeps the three that have a free slot
    beside it and gives back only the two beyond them. Giving back every waiting delivery made a batch of
    redeliveries start one at a time, each giving back and taking again the rest (the sqs-c8 kill storm's
    crawl: 106 job starts in 300 s)."""
    queue.push_many([jobs.Noop() for _ in range(6)], queue=queue_name)
    reserved = queue.pop_many(0, [queue_name], 6).jobs
    assert len(reserved) == 6
    waiting = [dataclasses.replace(job, attempts=2) for job in reserved[1:]]
    given_back: list[str] = []
    unreserve = queue.unreserve
    monkeypatch.setattr(queue, "unreserve", lambda job, delay=0: (given_back.append(job.id), unreserve(job, delay))[1])
    worker = Worker(queue, recorder=None)
    loop = Dispatcher(worker, worker._runner, 4, 4)
    try:
        loop._waiting.extend((job, 0.0) for job in waiting)
        loop._before_a_redelivery()
        assert given_back == [job.id for job in waiting[3:]]
        assert [job.id for job, _ in loop._waiting] == [job.id for job in waiting[:3]]
    finally:
        loop._unreserve_waiting()
        loop.acks.close()
        worker.close()
        queue.ack(reserved[0])
