"""pause(queue) / resume(queue) on every backend that stores jobs (kinetis_queue.control, docs/cancel-and-pause.md).

A worker takes no job from a paused queue (pushes still succeed) and takes them again once it is
resumed; a paused queue in a priority list leaves the others popped as ever. The multi-process view
(two ``queue_work`` processes) is tests/operator/test_pause_workers.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from kinetis_queue.contracts import Queue, QueuedJob
from kinetis_queue.control import pause, paused_queues, resume
from kinetis_queue.control.hooks import ControlHooks
from kinetis_queue.exceptions import InvalidQueueArgumentError
from kinetis_queue.hooks import SkipDelivery
from kinetis_queue.limits import AtLimit
from kinetis_queue.models import PausedQueue
from kinetis_queue.worker import ExitReason, JobOutcome, JobReport, Worker
from tests import jobs
from tests.support.backends import Backend
from tests.support.helpers import wait_until

pytestmark = pytest.mark.trait("stores_jobs")


@pytest.fixture
def paused(backend: Backend, queue_name: str) -> Iterator[str]:
    """``queue_name`` paused on the backend's connection for the test (resumed afterwards in any case)."""
    assert pause(queue_name, backend.connection) is True
    try:
        yield queue_name
    finally:
        resume(queue_name, backend.connection)


def _labels() -> list[object]:
    return [call[1] for call in jobs.CALLS]


def test_a_paused_queue_is_not_popped_and_pushes_still_succeed(
    connection: Queue, backend: Backend, paused: str
) -> None:
    job_id = connection.push(jobs.Records("waits"), queue=paused)
    assert len(job_id) == 32
    worker = Worker(connection, recorder=None)
    try:
        for _ in range(3):
            assert worker.process_next(0.2, [paused]) is False
        assert jobs.CALLS == []
        assert connection.size(paused) == 1  # still waiting, untouched

        assert resume(paused, backend.connection) is True
        wait_until(lambda: worker.process_next(0.2, [paused]))  # the worker sees it within about a second
    finally:
        worker.close()
    assert _labels() == ["waits"]


def test_a_paused_queue_in_a_priority_list_leaves_the_others_popped(
    connection: Queue, backend: Backend, paused: str
) -> None:
    low = paused + "-low"
    connection.push(jobs.Records("high"), queue=paused)
    connection.push(jobs.Records("low-1"), queue=low)
    connection.push(jobs.Records("low-2"), queue=low)
    reports: list[JobReport] = []
    worker = Worker(connection, recorder=None, reporter=reports.append)
    try:
        assert worker.run(0.3, [paused, low], stop_when_empty=True) is ExitReason.EMPTY
        assert _labels() == ["low-1", "low-2"]
        assert connection.size(paused) == 1

        resume(paused, backend.connection)
        wait_until(lambda: worker.process_next(0.2, [paused, low]))
    finally:
        worker.close()
    assert _labels() == ["low-1", "low-2", "high"]
    assert {report.outcome for report in reports} == {JobOutcome.SUCCEEDED}


def test_run_waits_while_every_queue_is_paused(connection: Queue, backend: Backend, paused: str) -> None:
    connection.push(jobs.Records("waits"), queue=paused)
    worker = Worker(connection, recorder=None)
    try:
        assert worker.run(1, [paused], max_time=1.5) is ExitReason.MAX_TIME
    finally:
        worker.close()
    assert jobs.CALLS == []
    assert connection.size(paused) == 1
    resume(paused, backend.connection)
    worker = Worker(connection, recorder=None)  # a worker started after the resume sees it at once
    try:
        assert worker.process_next(5, [paused]) is True
    finally:
        worker.close()
    assert _labels() == ["waits"]


def _delivery(queue_name: str) -> QueuedJob:
    """A delivery as a worker holds it; the hooks read only its id and queue (and the Django database)."""
    return QueuedJob(uuid.uuid4().hex, queue_name, "tests.jobs.Noop", {}, 1, None, datetime.now(UTC))


def test_a_delivery_reserved_before_the_pause_is_given_back_unstarted(queue_name: str) -> None:
    """A pop that began before the pause can still reserve a job of the queue: admit() then raises AtLimit,
    so the worker gives it back (unreserve(), no attempt charged) instead of starting it. Hooks that were
    never started (no background thread) refresh on the delivery path once their data is a second old."""
    job = _delivery(queue_name)
    hooks = ControlHooks("sqlite")
    hooks.admit(job)  # not paused: admitted
    pause(queue_name, "sqlite")
    try:
        with pytest.raises(AtLimit, match="is paused"):
            wait_until(lambda: hooks.admit(job))
        assert hooks.active((queue_name, "other")) == ("other",)
        assert hooks.admit(_delivery("other")) is None
    finally:
        resume(queue_name, "sqlite")
    wait_until(lambda: hooks.active((queue_name,)) == (queue_name,))


def test_hooks_never_started_see_cancellations_too(queue_name: str) -> None:
    from kinetis_queue import cancel

    pytest.importorskip("redis", reason="a core-only install has no Redis client")
    job, other = _delivery(queue_name), _delivery(queue_name)
    hooks = ControlHooks("redis")
    assert hooks.cancelled(job) is False
    assert cancel(job.id, "redis") is True  # Redis cannot look it up: recorded
    wait_until(lambda: hooks.cancelled(job))
    with pytest.raises(SkipDelivery, match="cancelled"):
        hooks.admit(job)
    assert hooks.cancelled(other) is False
    hooks.admit(other)


def test_pause_and_resume_are_idempotent(backend: Backend, queue_name: str) -> None:
    assert pause(queue_name, backend.connection) is True
    assert pause(queue_name, backend.connection) is False
    assert queue_name in paused_queues(backend.connection)
    assert PausedQueue.objects.filter(connection=backend.connection, queue=queue_name).count() == 1
    assert resume(queue_name, backend.connection) is True
    assert resume(queue_name, backend.connection) is False
    assert queue_name not in paused_queues(backend.connection)


def test_a_pause_belongs_to_one_connection_and_one_exact_queue_name(queue_name: str) -> None:
    pause(queue_name, "sqlite")
    try:
        assert queue_name in paused_queues("sqlite")
        assert queue_name not in paused_queues("postgres")
        assert queue_name.upper() not in paused_queues("sqlite")
        assert resume(queue_name.upper(), "sqlite") is False  # queue names are compared exactly
    finally:
        resume(queue_name, "sqlite")


@pytest.mark.parametrize(
    ("queue", "connection", "message"),
    [
        ("bad name", None, "queue name 'bad name' is invalid"),
        ("", None, "queue name '' is invalid"),
        ("q" * 81, None, "is invalid: use 1 to 80"),
        ("ok", "Bad!", "connection 'Bad!' is invalid"),
        ("ok", "sync", "runs each job inside push"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_written(queue: str, connection: str | None, message: str) -> None:
    before = PausedQueue.objects.count()
    for call in (pause, resume):
        with pytest.raises(InvalidQueueArgumentError, match=message):
            call(queue, connection)
    assert PausedQueue.objects.count() == before


def test_an_unknown_connection_is_refused() -> None:
    from kinetis_queue.exceptions import QueueConfigurationError

    with pytest.raises(QueueConfigurationError, match="not configured"):
        pause("q" + uuid.uuid4().hex[:8], "nosuch")
