"""Worker.run() and process_next() at their edges: a zero poll timeout, a stop asked before run(), run()
outside the main thread, an operator's Ctrl-C outside run(), a reporter that raises, and an exception class
whose __module__ has no text form."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator

import pytest

from kinetis_queue import Job, queues
from kinetis_queue.contracts import Queue
from kinetis_queue.exceptions import InvalidQueueArgumentError
from kinetis_queue.outcomes import ExitReason
from kinetis_queue.worker import JobReport, Worker
from tests import jobs


class Interrupted(Job):
    """Raises KeyboardInterrupt, as the operator's Ctrl-C landing inside handle() does."""

    def handle(self) -> None:
        raise KeyboardInterrupt


@pytest.fixture
def queue() -> Queue:
    return queues["sqlite"]


@pytest.fixture
def worker(queue: Queue) -> Iterator[Worker]:
    built = Worker(queue, recorder=None)
    yield built
    built.close()


def test_run_refuses_a_zero_poll_timeout_before_touching_the_queue(
    queue: Queue, worker: Worker, queue_name: str
) -> None:
    """0 would make each pop wait forever, so a stop would never be seen."""
    queue.push(jobs.Noop(), queue=queue_name)
    with pytest.raises(InvalidQueueArgumentError, match="poll timeout must be positive"):
        worker.run(0, [queue_name])
    assert worker.processed == 0 and queue.size(queue_name) == 1


def test_a_stop_asked_before_run_returns_shutdown_without_popping(
    queue: Queue, worker: Worker, queue_name: str
) -> None:
    queue.push(jobs.Noop(), queue=queue_name)
    worker.stop()
    assert worker.run(1, [queue_name]) is ExitReason.SHUTDOWN
    assert worker.processed == 0 and queue.size(queue_name) == 1


def test_run_works_outside_the_main_thread_and_leaves_the_signal_handlers_alone(
    queue: Queue, worker: Worker, queue_name: str
) -> None:
    """signal.signal() is main-thread only: a worker thread runs without installing handlers."""
    queue.push(jobs.Noop(), queue=queue_name)
    before = signal.getsignal(signal.SIGTERM)
    reasons: list[ExitReason | BaseException] = []

    def target() -> None:
        try:
            reasons.append(worker.run(5, [queue_name], once=True))
        except BaseException as exc:
            reasons.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(30)
    assert reasons == [ExitReason.COMPLETED]
    assert signal.getsignal(signal.SIGTERM) is before
    assert worker.processed == 1 and queue.size(queue_name) == 0


def test_a_ctrl_c_outside_run_propagates_from_process_next(queue: Queue, worker: Worker, queue_name: str) -> None:
    """With Python's own SIGINT handler in place (no run()), a KeyboardInterrupt is the operator's: it stops."""
    queue.push(Interrupted(), queue=queue_name)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            worker.process_next(5, [queue_name])
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_reporter_that_raises_is_contained_and_the_job_is_still_settled(
    queue: Queue, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(report: JobReport) -> None:
        raise RuntimeError("reporter bug")

    queue.push(jobs.Noop(), queue=queue_name)
    worker = Worker(queue, recorder=None, reporter=broken)
    try:
        with caplog.at_level(logging.ERROR, logger="kinetis_queue"):
            assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()
    assert queue.size(queue_name) == 0
    assert "The job reporter raised RuntimeError (contained)" in caplog.text


class Unprintable:
    """A value that cannot be formatted into text (an f-string raises)."""

    def __format__(self, spec: str) -> str:
        raise RuntimeError("no text")


class OddModuleError(Exception):
    """An exception class whose ``__module__`` has no text form (a class may set it to anything)."""


OddModuleError.__module__ = Unprintable()  # type: ignore[assignment]


class RaisesOddModuleError(Job):
    def handle(self) -> None:
        raise OddModuleError("boom")


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_an_exception_class_whose_module_has_no_text_is_recorded_by_its_qualified_name(
    queue: Queue, queue_name: str
) -> None:
    from kinetis_queue.models import FailedJob

    job_id = queue.push(RaisesOddModuleError(), queue=queue_name, max_attempts=1)
    worker = Worker(queue, connection="sqlite")
    try:
        assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()
    record = FailedJob.objects.get(job_id=job_id)
    assert record.exception_class == "OddModuleError"
    assert queue.size(queue_name) == 0
