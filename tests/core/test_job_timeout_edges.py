"""The job timeout at its edges: a second SIGALRM after the interrupt is ignored, and outside the main thread a
job under its limit succeeds (the limit is checked after handle() returns)."""

from __future__ import annotations

import signal
import threading

import pytest

from kinetis_queue import Job, queues
from kinetis_queue.contracts import Queue
from kinetis_queue.exceptions import JobTimeoutInterrupt
from kinetis_queue.worker import JobReport, Worker
from tests import jobs


class CatchesItsTimeout(Job):
    """Waits to be interrupted, catches it, then raises SIGALRM itself before returning."""

    def handle(self) -> None:
        try:
            threading.Event().wait(60)
        except JobTimeoutInterrupt:
            jobs.CALLS.append(("interrupted",))
        signal.raise_signal(signal.SIGALRM)  # runs the handler at once
        jobs.CALLS.append(("second alarm ignored",))


@pytest.fixture
def queue() -> Queue:
    return queues["sqlite"]


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_the_interrupt_is_raised_once_and_a_later_alarm_is_ignored(queue: Queue, queue_name: str) -> None:
    """A job that swallows its interrupt still fails with JobTimeoutError; no second interrupt lands in it."""
    jobs.CALLS.clear()
    queue.push(CatchesItsTimeout(), queue=queue_name, max_attempts=1)
    reports: list[JobReport] = []
    worker = Worker(queue, recorder=None, job_timeout=0.2, reporter=reports.append)
    try:
        assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()
    assert jobs.CALLS == [("interrupted",), ("second alarm ignored",)]
    assert [(r.outcome, r.error) for r in reports] == [("failed", "JobTimeoutError")]


def test_outside_the_main_thread_a_job_under_its_limit_succeeds(queue: Queue, queue_name: str) -> None:
    queue.push(jobs.Noop(), queue=queue_name)
    reports: list[JobReport] = []
    worker = Worker(queue, recorder=None, job_timeout=60, reporter=reports.append)
    thread = threading.Thread(target=worker.process_next, args=(5, [queue_name]))
    thread.start()
    thread.join(30)
    worker.close()
    assert [(r.outcome, r.error) for r in reports] == [("succeeded", None)]
    assert queue.size(queue_name) == 0
