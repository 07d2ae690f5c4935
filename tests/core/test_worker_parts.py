"""The worker's parts at their edges (issue 14): the ack batch sent once it is full, the timeout
watchdog's disarmed and late deadlines, an async job that raises CancelledError itself, and the Worker's
``job_timeout`` and ``reporter`` set after construction. On the SQLite queue; no assertion on time."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Callable

import pytest

from kinetis_queue import Job, queues
from kinetis_queue.contracts import Queue
from kinetis_queue.exceptions import StaleJobHandleError
from kinetis_queue.outcomes import ExitReason
from kinetis_queue.worker import JobReport, Worker, dispatcher
from kinetis_queue.worker.acks import AckBatch
from kinetis_queue.worker.async_loop import run_coroutine
from kinetis_queue.worker.timeout_watchdog import Watchdog
from tests import jobs
from tests.support.helpers import wait_until


class CancelsItself(Job):
    """An async job whose handle() raises CancelledError of its own (no timeout cancelled it)."""

    async def handle(self) -> None:
        await asyncio.sleep(0)
        raise asyncio.CancelledError


class WaitsLong(Job):
    """Waits far longer than any limit a test sets (interrupted by --timeout)."""

    def handle(self) -> None:
        threading.Event().wait(60)


def in_wait(thread: threading.Thread) -> bool:
    """Whether ``thread`` is blocked in a Condition.wait() now."""
    frame = sys._current_frames().get(thread.ident or 0)
    return frame is not None and frame.f_code.co_name == "wait"


@pytest.fixture
def queue() -> Queue:
    return queues["sqlite"]


def test_a_full_ack_batch_is_sent_without_waiting_for_its_delay(queue: Queue, queue_name: str) -> None:
    """MAX_ACK_BATCH: the flusher sends a batch as soon as it holds max_batch acks, not at max_delay."""
    queue.push_many([jobs.Noop(), jobs.Noop()], queue=queue_name)
    held = queue.pop_many(1, [queue_name], 2).jobs
    assert len(held) == 2
    results: list[StaleJobHandleError | None] = []
    batch = AckBatch(queue, max_delay=3600, max_batch=2)
    try:
        batch.add(held[0], results.append)
        flusher = batch._loop._thread  # the flusher: the batch's BackgroundLoop
        assert flusher is not None
        wait_until(lambda: in_wait(flusher))  # asleep until max_delay: only the full batch wakes it
        batch.add(held[1], results.append)
        wait_until(lambda: len(results) == 2)  # an hour before max_delay would send it
    finally:
        batch.close()
    assert results == [None, None]
    assert queue.pop(0.1, [queue_name]) is None  # both acked: nothing comes back


def test_a_disarmed_deadline_never_calls_its_callback() -> None:
    """The watchdog drops a disarmed entry when its deadline comes, and still serves the later ones."""
    called: list[str] = []
    watchdog = Watchdog()
    try:
        early = watchdog.arm(0.05, lambda: called.append("disarmed"))
        watchdog.disarm(early)
        later = watchdog.arm(0.2, lambda: called.append("armed"))
        wait_until(lambda: called)
        watchdog.disarm(later)  # already fired: nothing to cancel
        watchdog.disarm(early)  # already dropped: nothing to cancel
    finally:
        watchdog.close()
    assert called == ["armed"]


def test_run_coroutine_raises_a_cancellation_the_coroutine_raised_itself() -> None:
    with pytest.raises(asyncio.CancelledError):
        run_coroutine(CancelsItself().handle())


@pytest.mark.parametrize("concurrency", [1, 2])
@pytest.mark.logs_errors("kinetis_queue.worker")
def test_an_async_job_that_raises_cancelled_error_fails_its_attempt_and_the_worker_goes_on(
    queue: Queue, queue_name: str, concurrency: int
) -> None:
    """Contract: whatever handle() raises is the job's own failure, BaseExceptions included."""
    queue.push(CancelsItself(), queue=queue_name, max_attempts=1)
    queue.push(jobs.Noop(), queue=queue_name)
    reports: list[JobReport] = []
    worker = Worker(queue, recorder=None, reporter=reports.append, concurrency=concurrency)
    try:
        worker.run(1, [queue_name], stop_when_empty=True)
    finally:
        worker.close()
    assert sorted((r.job_class.rsplit(".", 1)[-1], r.outcome, r.error) for r in reports) == [
        ("CancelsItself", "failed", "CancelledError"),
        ("Noop", "succeeded", None),
    ]
    assert queue.size(queue_name) == 0


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_job_timeout_and_reporter_set_after_construction_take_effect(queue: Queue, queue_name: str) -> None:
    queue.push(WaitsLong(), queue=queue_name, max_attempts=1)
    worker = Worker(queue, recorder=None)
    assert worker.job_timeout is None and worker.reporter is None
    reports: list[JobReport] = []
    worker.job_timeout = 0.2
    worker.reporter = reports.append
    try:
        assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()
    assert worker.job_timeout == 0.2 and worker.reporter == reports.append
    assert [(r.outcome, r.error) for r in reports] == [("failed", "JobTimeoutError")]


class Recalled(Watchdog):
    """The real watchdog, keeping each armed callback so a test can call it late."""

    callbacks: list[Callable[[], None]] = []

    def arm(self, seconds: float, expired: Callable[[], None]) -> int:
        Recalled.callbacks.append(expired)
        return super().arm(seconds, expired)


def test_a_pool_job_under_its_limit_is_settled_once_even_if_its_deadline_fires_late(
    queue: Queue, queue_name: str, monkeypatch: pytest.MonkeyPatch, outcomes: list
) -> None:
    """The job's thread disarms its deadline when handle() returns; a deadline the watchdog already
    took (handle() returned just then) loses the claim to the job's own settlement and settles nothing."""
    monkeypatch.setattr(dispatcher, "Watchdog", Recalled)
    Recalled.callbacks.clear()
    queue.push(jobs.Noop(), queue=queue_name)
    worker = Worker(queue, recorder=None, concurrency=2, job_timeout=60)
    try:
        assert worker.run(1, [queue_name], once=True) is ExitReason.COMPLETED
        (late,) = Recalled.callbacks
        late()  # the deadline, as if the watchdog had taken it before the disarm
        assert worker._runner.abandoned() == 0
    finally:
        worker.close()
    assert [name for name, _ in outcomes] == ["job_succeeded"]
    assert queue.pop(0.1, [queue_name]) is None
