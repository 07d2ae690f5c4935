"""The options ``@task(...)`` takes on KinetisTaskBackend (issue 19 part 4): each one honoured by the worker
on every store that keeps jobs (sync runs a task inside its enqueue: one attempt, no worker), and each
invalid one rejected when the task is defined, naming the option."""

from __future__ import annotations

import dataclasses
import io
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import reverse

from kinetis_queue import queues
from kinetis_queue.contracts import Queue
from kinetis_queue.contrib.tasks.backend import KinetisTaskBackend, RunTask
from kinetis_queue.contrib.tasks.compat import InvalidTask, TaskResultStatus, task
from kinetis_queue.contrib.tasks.options import KinetisTask
from kinetis_queue.limits import ConcurrencyLimit
from kinetis_queue.limits.keeper import SlotKeeper
from kinetis_queue.models import FailedJob, TaskResultRecord
from kinetis_queue.ratelimits import RateLimit
from kinetis_queue.worker import JobOutcome, JobReport, Worker
from kinetis_queue.worker.settlement import RETRY_KEY, job_retry_delay
from tests import task_option_defs as defs
from tests.support.backends import Backend
from tests.support.stray_logs import TASKS_LOGGER


def tasks_on(connection: str) -> dict[str, Any]:
    return {
        "default": {
            "BACKEND": "kinetis_queue.tasks.KinetisTaskBackend",
            "QUEUES": [],
            "OPTIONS": {"CONNECTION": connection},
        }
    }


@pytest.fixture
def tq(connection: Queue, backend: Backend, queue_name: str) -> Iterator[str]:
    """A fresh queue on the store under test, with the default task backend pushing to that store."""
    defs.SEEN.clear()
    connection.size(queue_name)  # the store's test support creates (SQS) or tracks (RabbitMQ) the queue
    with override_settings(TASKS=tasks_on(backend.connection)):
        yield queue_name


class Run:
    """A real Worker on the store under test whose settings would differ from every task's options:
    5 attempts, no retry delay, no time limit. Each ``step()`` processes one delivery."""

    def __init__(self, connection: Queue, backend: Backend, **options: Any) -> None:
        self.reports: list[JobReport] = []
        self.worker = Worker(
            connection,
            connection=backend.connection,
            default_max_attempts=5,
            reporter=self.reports.append,
            **{"retry_base_delay": 0, **options},
        )

    def step(self, queue: str, timeout: float = 10) -> JobReport:
        before = len(self.reports)
        assert self.worker.process_next(timeout, [queue]), "no delivery arrived"
        assert len(self.reports) == before + 1
        return self.reports[-1]

    def close(self) -> None:
        self.worker.close()


@pytest.fixture
def run(connection: Queue, backend: Backend) -> Iterator[Run]:
    runner = Run(connection, backend)
    yield runner
    runner.close()


# -- definition ---------------------------------------------------------------------------------------


def test_the_backend_builds_its_tasks_with_the_options() -> None:
    assert KinetisTaskBackend.task_class is KinetisTask
    assert isinstance(defs.always_fails, KinetisTask)
    assert (defs.always_fails.max_attempts, defs.always_fails.retry_delay) == (2, 0)
    # using() keeps them (it is dataclasses.replace), and replace() changes them per call, re-validated.
    assert defs.always_fails.using(queue_name="other").max_attempts == 2
    assert dataclasses.replace(defs.always_fails, max_attempts=4).max_attempts == 4
    with pytest.raises(InvalidTask, match="max_attempts"):
        dataclasses.replace(defs.always_fails, max_attempts=0)


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 2.5}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"retry_delay": -1}, "retry_delay"),
        ({"retry_delay": 10**6}, "retry_delay"),
        ({"retry_delay": float("nan")}, "retry_delay"),
        ({"backoff": "linear"}, "backoff"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": "5"}, "timeout"),
        ({"timeout": float("inf")}, "timeout"),
        ({"unique_for": 0}, "unique_for"),
        ({"unique_for": 10**9}, "unique_for"),
        ({"unique_until": "forever"}, "unique_until"),
        ({"concurrency_limit": 0}, "concurrency_limit"),
        ({"concurrency_limit": 10**6}, "concurrency_limit"),
        ({"concurrency_key": ""}, "concurrency_key"),
        ({"concurrency_key": "k"}, "concurrency_key"),  # without concurrency_limit
        ({"rate_limit": 10}, "rate_limit"),
        ({"rate_limit": (0, 60)}, "rate_limit"),
        ({"rate_limit": (10, 60, "leaky")}, "rate_limit"),
        ({"rate_key": "k"}, "rate_key"),  # without rate_limit
        ({"rate_limit": (10, 60), "rate_key": ""}, "rate_key"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_an_invalid_option_is_rejected_at_definition_naming_it(options: dict[str, Any], key: str) -> None:
    with pytest.raises(InvalidTask) as raised:
        task(**options)(defs.plain)
    assert str(raised.value).startswith(key)


def test_an_unknown_option_is_rejected_at_definition_naming_it() -> None:
    with pytest.raises(TypeError, match="max_attemps"):
        task(max_attemps=3)(defs.plain)


def test_run_after_stays_dynamic_as_django_defines_it() -> None:
    with pytest.raises(TypeError, match="run_after"):
        task(run_after=None)(defs.plain)


# -- honoured by the worker -------------------------------------------------------------------------


@pytest.mark.trait("stores_jobs")
@pytest.mark.logs_errors(TASKS_LOGGER, "kinetis_queue.worker")
def test_max_attempts_replaces_the_workers_cap(tq: str, run: Run) -> None:
    result = defs.always_fails.using(queue_name=tq).enqueue()
    first = run.step(tq)
    assert first.outcome is JobOutcome.RELEASED and first.delay == 0.0  # retry_delay=0, not the worker's
    second = run.step(tq)
    assert second.outcome is JobOutcome.FAILED  # the task's 2, not the worker's 5
    assert defs.SEEN == [("always_fails", 1), ("always_fails", 2)]
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and len(result.errors) == 2


@pytest.mark.trait("stores_jobs")
def test_a_fixed_retry_delay_is_the_delay_of_each_retry(tq: str, run: Run, connection: Queue) -> None:
    result = defs.fails_with_fixed_delay.using(queue_name=tq).enqueue()
    report = run.step(tq)
    assert (report.outcome, report.delay) == (JobOutcome.RELEASED, 7.0)
    assert connection.pop(0.2, [tq]) is None  # held for its delay, not back at once
    result.refresh()
    assert result.status == TaskResultStatus.READY and len(result.errors) == 1


@pytest.mark.trait("stores_jobs")
def test_an_exponential_retry_delay_starts_at_the_tasks_delay(tq: str, run: Run, connection: Queue) -> None:
    defs.fails_with_growing_delay.using(queue_name=tq).enqueue()
    report = run.step(tq)
    assert (report.outcome, report.delay) == (JobOutcome.RELEASED, 3.0)
    assert connection.pop(0.2, [tq]) is None


def test_the_retry_rule_in_a_jobs_metadata_doubles_or_stays_fixed() -> None:
    """The worker's side of retry_delay/backoff (settlement.job_retry_delay), attempt by attempt."""

    class Delivered:
        def __init__(self, attempts: int, rule: Any) -> None:
            self.attempts = attempts
            self.metadata = {} if rule is None else {RETRY_KEY: rule}

    def delays(rule: Any, base: float = 1.0) -> list[float]:
        return [job_retry_delay(Delivered(n, rule), base) for n in (1, 2, 3)]  # type: ignore[arg-type]

    assert delays(None) == [1.0, 2.0, 4.0]  # the worker's own rule
    assert delays({"delay": 3, "backoff": "exponential"}) == [3.0, 6.0, 12.0]
    assert delays({"delay": 3, "backoff": "fixed"}) == [3.0, 3.0, 3.0]
    assert delays({"backoff": "fixed"}, base=5) == [5.0, 5.0, 5.0]  # the worker's delay, not doubled
    assert delays({"delay": -4, "backoff": "sideways"}) == [1.0, 2.0, 4.0]  # invalid: ignored


@pytest.mark.trait("stores_jobs")
@pytest.mark.logs_errors(TASKS_LOGGER, "kinetis_queue.worker")
def test_timeout_limits_each_attempt_in_place_of_the_workers(connection: Queue, backend: Backend, tq: str) -> None:
    run = Run(connection, backend, job_timeout=300)
    try:
        result = defs.sleeps.using(queue_name=tq).enqueue(60)
        report = run.step(tq)
    finally:
        run.close()
    assert (report.outcome, report.error) == (JobOutcome.FAILED, "JobTimeoutError")
    assert report.duration < 60  # interrupted by the task's 2 s, not the worker's 300 s
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert defs.SEEN == [("sleeps", 60)]


@pytest.mark.trait("stores_jobs")
def test_timeout_leaves_a_quick_attempt_alone(tq: str, run: Run) -> None:
    result = defs.sleeps.using(queue_name=tq).enqueue(0)
    assert run.step(tq).outcome is JobOutcome.SUCCEEDED
    result.refresh()
    assert result.return_value == "woke"


@pytest.mark.trait("stores_jobs")
def test_unique_for_returns_the_waiting_tasks_result(tq: str, run: Run, connection: Queue) -> None:
    first = defs.unique_add.using(queue_name=tq).enqueue(1, 2)
    again = defs.unique_add.using(queue_name=tq).enqueue(1, 2)
    other = defs.unique_add.using(queue_name=tq).enqueue(2, 2)
    assert again.id == first.id and other.id != first.id
    assert TaskResultRecord.objects.filter(queue_name=tq).count() == 2
    assert run.step(tq).outcome is JobOutcome.SUCCEEDED
    assert run.step(tq).outcome is JobOutcome.SUCCEEDED
    assert connection.pop(0.2, [tq]) is None  # two jobs were queued, not three
    assert sorted(defs.SEEN) == [("unique_add", 1, 2), ("unique_add", 2, 2)]
    # Settled: the key is free, so the same enqueue queues the task again.
    later = defs.unique_add.using(queue_name=tq).enqueue(1, 2)
    assert later.id != first.id and later.status == TaskResultStatus.READY
    assert run.step(tq).outcome is JobOutcome.SUCCEEDED


def test_unique_for_takes_arguments_of_any_size(queue_name: str) -> None:
    """The key is a digest: arguments far beyond a unique key's 1000 characters still make one."""
    big = "x" * 5000
    first = defs.unique_add.using(queue_name=queue_name).enqueue(big, "")
    again = defs.unique_add.using(queue_name=queue_name).enqueue(big, "")
    assert again.id == first.id
    job = queues["sqlite"].pop(5, [queue_name])
    assert job is not None
    queues["sqlite"].ack(job)


@pytest.mark.trait("stores_jobs")
def test_concurrency_limit_holds_a_run_while_its_slots_are_taken(
    tq: str, run: Run, connection: Queue, backend: Backend
) -> None:
    result = defs.one_at_a_time.using(queue_name=tq).enqueue("b")
    carrier = RunTask(defs.one_at_a_time.module_path, [], {}, "elsewhere", "default")
    limit = carrier.concurrency_limit_for()
    assert limit == ConcurrencyLimit("django.tasks:tests.task_option_defs.one_at_a_time", 1, 1.0)
    keeper = SlotKeeper(connection)  # another worker's run of the task holds its one slot
    try:
        slot = keeper.take(carrier, limit)
        assert slot is not None
        assert run.step(tq).outcome is JobOutcome.DEFERRED
        assert defs.SEEN == [] and TaskResultRecord.objects.get(pk=result.id).status == "READY"
        keeper.give_back(slot)
    finally:
        keeper.close()
    assert run.step(tq).outcome is JobOutcome.SUCCEEDED
    assert defs.SEEN == [("one_at_a_time", "b")]


def test_a_task_without_a_limit_and_an_unknown_task_have_none() -> None:
    assert RunTask("tests.task_option_defs.unique_add", [], {}, "r", "default").concurrency_limit_for() is None
    assert RunTask("tests.nowhere.gone", [], {}, "r", "default").concurrency_limit_for() is None
    assert RunTask("tests.task_option_defs.unique_add", [], {}, "r", "default").rate_limit_for() is None
    assert RunTask("tests.nowhere.gone", [], {}, "r", "default").rate_limit_for() is None


def test_a_tasks_rate_limit_is_read_from_its_definition() -> None:
    carrier = RunTask(defs.once_a_minute.module_path, [], {}, "r", "default")
    assert carrier.rate_limit_for() == (RateLimit(1, 60.0), "django.tasks:tests.task_option_defs.once_a_minute")


@pytest.mark.trait("stores_jobs")
def test_rate_limit_defers_a_run_until_its_window_allows(
    tq: str, run: Run, connection: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker asks the carrier for the task's limit: the second run within the window is deferred, unstarted.
    (The key is made fresh here: the task's own key, its path, would share a window with earlier runs.)"""
    key = f"tests-{uuid.uuid4().hex}"
    monkeypatch.setattr(RunTask, "rate_limit_for", lambda self: (RateLimit(1, 60.0), key))
    first = defs.once_a_minute.using(queue_name=tq).enqueue("a")
    second = defs.once_a_minute.using(queue_name=tq).enqueue("b")
    assert run.step(tq).outcome is JobOutcome.SUCCEEDED
    assert run.step(tq).outcome is JobOutcome.DEFERRED
    assert defs.SEEN == [("once_a_minute", "a")]
    assert TaskResultRecord.objects.get(pk=first.id).status == "SUCCESSFUL"
    assert TaskResultRecord.objects.get(pk=second.id).status == "READY"


# -- kept by a retry (issue 27 item 12) ----------------------------------------------------------------


def _retry(via: str, record: FailedJob) -> None:
    """Retry ``record`` as an operator would: ``manage.py queue_retry ID`` or the admin's Retry action."""
    if via == "queue_retry":
        out = io.StringIO()
        call_command("queue_retry", str(record.pk), stdout=out)
        assert out.getvalue().startswith(f"Failed job {record.pk} pushed again as job ")
    else:
        admin = User.objects.create_superuser(f"admin-{uuid.uuid4().hex[:12]}", password=None)
        client = Client()
        client.force_login(admin)
        data = {"action": "retry_selected", "_selected_action": [str(record.pk)], "index": "0"}
        assert client.post(reverse("admin:kinetis_queue_failedjob_changelist"), data).status_code == 302
    assert not FailedJob.objects.filter(pk=record.pk).exists()


RETRY_PATHS = pytest.mark.parametrize("via", ["queue_retry", "admin"])


@pytest.mark.trait("stores_jobs")
@RETRY_PATHS
@pytest.mark.logs_errors(TASKS_LOGGER, "kinetis_queue.worker")
def test_a_retried_task_keeps_its_timeout(connection: Queue, backend: Backend, tq: str, via: str) -> None:
    """@task(timeout=2) on a worker whose own limit is 300 s: the retried attempt is interrupted too."""
    run = Run(connection, backend, job_timeout=300)
    try:
        defs.sleeps.using(queue_name=tq).enqueue(30)
        assert (run.step(tq).outcome, defs.SEEN) == (JobOutcome.FAILED, [("sleeps", 30)])
        _retry(via, FailedJob.objects.get(queue=tq))
        report = run.step(tq)
    finally:
        run.close()
    assert (report.outcome, report.error) == (JobOutcome.FAILED, "JobTimeoutError")  # not the worker's 300 s
    assert FailedJob.objects.filter(queue=tq).count() == 1


@pytest.mark.trait("stores_jobs")
@RETRY_PATHS
@pytest.mark.logs_errors(TASKS_LOGGER, "kinetis_queue.worker")
def test_a_retried_task_keeps_its_retry_delay_and_max_attempts(
    connection: Queue, backend: Backend, tq: str, via: str
) -> None:
    """@task(retry_delay=0, max_attempts=2) on a worker whose own base delay is 5 s and cap is 5 attempts."""
    run = Run(connection, backend, retry_base_delay=5)
    try:
        defs.always_fails.using(queue_name=tq).enqueue()
        assert [run.step(tq).outcome for _ in range(2)] == [JobOutcome.RELEASED, JobOutcome.FAILED]
        _retry(via, FailedJob.objects.get(queue=tq))
        first = run.step(tq)
        second = run.step(tq)  # back at once: the task's delay of 0, not the worker's 5 s
    finally:
        run.close()
    assert (first.outcome, first.delay) == (JobOutcome.RELEASED, 0.0)
    assert second.outcome is JobOutcome.FAILED  # the task's 2 attempts, not the worker's 5
    assert len(defs.SEEN) == 4  # two attempts, then two after the retry
