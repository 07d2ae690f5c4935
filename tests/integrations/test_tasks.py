"""The django.tasks backend (kinetis_queue.contrib.tasks): Django's @task API run by the kinetis worker (issue 8)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connections as db_connections
from django.db import transaction
from django.test import override_settings
from django.utils import timezone
from django.utils.crypto import get_random_string

from kinetis_queue import queues
from kinetis_queue.contracts import Queue
from kinetis_queue.contrib.tasks.backend import WORKER_ID, KinetisTaskBackend, RunTask, _fenced_update
from kinetis_queue.contrib.tasks.compat import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    default_task_backend,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from kinetis_queue.models import FailedJob, TaskResultRecord
from kinetis_queue.worker import JobOutcome, JobReport, Worker
from tests import task_defs
from tests.support.backends import Backend
from tests.support.helpers import wait_until
from tests.support.stray_logs import TASKS_LOGGER

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def tq(queue_name: str) -> str:
    """A fresh queue name for the tasks of one test (tasks pick it through .using(queue_name=...))."""
    task_defs.SEEN.clear()
    return queue_name


@pytest.fixture
def events() -> Iterator[list[tuple[str, str]]]:
    seen: list[tuple[str, str]] = []
    receivers = []
    for name, sig in (("enqueued", task_enqueued), ("started", task_started), ("finished", task_finished)):

        def receiver(sender: Any, task_result: Any, _name: str = name, **kwargs: Any) -> None:
            seen.append((_name, task_result.status))

        sig.connect(receiver, weak=False)
        receivers.append((sig, receiver))
    yield seen
    for sig, receiver in receivers:
        sig.disconnect(receiver)


def work(queue: str, n: int = 1, **options: Any) -> None:
    worker = Worker(queues["sqlite"], **{"retry_base_delay": 0, **options})
    try:
        for _ in range(n):
            assert worker.process_next(5, [queue])
    finally:
        worker.close()


def test_the_backend_declares_what_it_supports_and_checks_its_connection_lazily() -> None:
    backend = task_backends["default"]
    assert isinstance(backend, KinetisTaskBackend)
    assert backend.supports_defer and backend.supports_get_result
    assert backend.supports_async_task and backend.supports_priority  # its connection (SQL) orders by priority
    # __init__ touches nothing: a bad connection surfaces in the system check, naming the key.
    unbuilt = KinetisTaskBackend("other", {"OPTIONS": {"CONNECTION": "nosuch"}})
    assert [e.id for e in unbuilt.check()] == ["kinetis_queue.E101"]
    assert "CONNECTION" in unbuilt.check()[0].msg
    bad_wait = KinetisTaskBackend("other", {"OPTIONS": {"RESULT_ROW_WAIT": -1}})
    assert [e.id for e in bad_wait.check()] == ["kinetis_queue.E102"]
    assert "RESULT_ROW_WAIT" in bad_wait.check()[0].msg


def test_an_enqueued_task_runs_on_the_worker_and_its_result_is_stored(tq: str, events: list) -> None:
    result = task_defs.add.using(queue_name=tq).enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    assert queues["sqlite"].size(tq) == 1
    work(tq)
    assert task_defs.SEEN == [("add", 2, 3)]
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.worker_ids == [WORKER_ID]
    assert result.started_at is not None and result.finished_at is not None
    assert events == [("enqueued", "READY"), ("started", "RUNNING"), ("finished", "SUCCESSFUL")]
    assert queues["sqlite"].size(tq) == 0


def test_arguments_come_back_as_enqueue_returned_them(tq: str) -> None:
    result = task_defs.echo.using(queue_name=tq).enqueue((1, 2), {3: "x"}, key=[True, None])
    assert result.args == [[1, 2], {"3": "x"}]
    work(tq)
    assert task_defs.SEEN == [("echo", ([1, 2], {"3": "x"}), {"key": [True, None]})]
    result.refresh()
    assert result.return_value == {"args": [[1, 2], {"3": "x"}], "kwargs": {"key": [True, None]}}


@pytest.mark.parametrize("bad", [float("nan"), {1, 2}, object()], ids=["nan", "set", "object"])
def test_arguments_without_a_json_round_trip_are_rejected_before_anything_is_stored(tq: str, bad: Any) -> None:
    before = TaskResultRecord.objects.count()
    with pytest.raises((TypeError, ValueError)):
        task_defs.echo.using(queue_name=tq).enqueue(bad)
    assert TaskResultRecord.objects.count() == before
    assert queues["sqlite"].size(tq) == 0


@pytest.mark.logs_errors(TASKS_LOGGER, "kinetis_queue.worker")
def test_a_failing_task_is_retried_then_failed_with_one_error_per_attempt(tq: str, events: list) -> None:
    result = task_defs.explode.using(queue_name=tq).enqueue()
    work(tq, default_max_attempts=2)
    result.refresh()
    assert result.status == TaskResultStatus.READY  # released for its retry
    assert len(result.errors) == 1
    work(tq, default_max_attempts=2)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"] * 2
    assert "task failed on purpose" in result.errors[-1].traceback
    assert result.finished_at is not None
    assert len(result.worker_ids) == 2
    assert FailedJob.objects.filter(queue=tq, job_class="kinetis_queue.contrib.tasks.backend.RunTask").count() == 1
    assert events[-1] == ("finished", "FAILED")


def test_the_context_counts_every_delivery(tq: str) -> None:
    result = task_defs.flaky.using(queue_name=tq).enqueue()
    work(tq, n=2, default_max_attempts=3)
    assert task_defs.SEEN == [("flaky", 1), ("flaky", 2)]
    result.refresh()
    assert (result.status, result.return_value, result.attempts) == (TaskResultStatus.SUCCESSFUL, 2, 2)


def test_an_async_task_runs(tq: str) -> None:
    result = task_defs.async_double.using(queue_name=tq).enqueue(21)
    work(tq)
    result.refresh()
    assert result.return_value == 42


@pytest.mark.logs_errors(TASKS_LOGGER)
def test_a_return_value_that_cannot_be_stored_is_a_final_failure_not_a_retry(tq: str) -> None:
    result = task_defs.returns_unstorable.using(queue_name=tq).enqueue()
    work(tq, default_max_attempts=5)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class_path == "builtins.TypeError"
    assert task_defs.SEEN == [("returns_unstorable",)]
    assert queues["sqlite"].size(tq) == 0  # acked: its effects happened, it must not run again


def test_run_after_is_the_push_delay(tq: str) -> None:
    result = task_defs.add.using(queue_name=tq, run_after=timezone.now() + timedelta(seconds=60)).enqueue(1, 1)
    assert queues["sqlite"].size(tq) == 1
    assert queues["sqlite"].pop(0.1, [tq]) is None
    assert result.task.run_after is not None


def test_validation_adds_our_rules() -> None:
    with pytest.raises(InvalidTask, match="Queue name"):
        task_defs.add.using(queue_name="bad.name")
    with pytest.raises(InvalidTask, match="priority"):
        task_defs.add.using(priority=101)


def not_discovered() -> None:
    """A module-level function of a module no worker imports at start-up (not a jobs/tasks module, not in IMPORTS)."""


def test_enqueue_accepts_only_a_task_a_worker_will_have_imported() -> None:
    """Issue 12 item 7: a task's module must be one discovery imports, else no worker could resolve it."""
    from kinetis_queue.contrib.tasks.compat import task

    with pytest.raises(InvalidTask, match="KINETIS_QUEUE\\['IMPORTS'\\]") as raised:
        task(not_discovered)
    assert "'tests.integrations.test_tasks.not_discovered'" in str(raised.value)
    assert task_defs.add.module_path == "tests.task_defs.add"  # listed in IMPORTS (tests/settings.py): accepted


def test_an_unknown_result_id_does_not_exist() -> None:
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("123")


def test_a_run_whose_delivery_was_replaced_cannot_write(tq: str) -> None:
    """Results are fenced by the delivery attempt."""
    result = task_defs.add.using(queue_name=tq).enqueue(1, 2)
    job_id = "a" * 32
    TaskResultRecord.objects.filter(pk=result.id).update(attempt=2, status="RUNNING", job_id=job_id)

    def overwrite(record: TaskResultRecord) -> None:
        record.status = "SUCCESSFUL"

    assert _fenced_update(result.id, job_id, 1, overwrite) is None
    # Another job cannot write a row RUNNING under its job, not even by starting a run.
    assert _fenced_update(result.id, "b" * 32, 5, overwrite, starting=True) is None
    assert TaskResultRecord.objects.get(pk=result.id).status == "RUNNING"
    assert _fenced_update(result.id, job_id, 2, overwrite) is not None
    job = queues["sqlite"].pop(5, [tq])
    assert job is not None
    queues["sqlite"].ack(job)


@pytest.mark.trait("stores_jobs")
def test_a_sigkilled_worker_leaves_no_task_in_limbo(connection: Any, backend: Any, tq: str, tmp_path: Path) -> None:
    """The inverse of django-tasks-db's kill test, on every store: a worker SIGKILLed mid-task; the task
    runs again (after the lease; at once on RabbitMQ) as attempt 2, ends SUCCESSFUL, both worker ids kept."""
    from django.test import override_settings

    connection.size(tq)  # the store's test support creates (SQS) or tracks (RabbitMQ) the queue
    marker = tmp_path / "running"
    tasks = {
        "default": {
            "BACKEND": "kinetis_queue.tasks.KinetisTaskBackend",
            "QUEUES": [],
            "OPTIONS": {"CONNECTION": backend.connection},
        }
    }
    with override_settings(TASKS=tasks):
        result = task_defs.hangs_on_first_attempt.using(queue_name=tq).enqueue(str(marker))
    env = {
        **os.environ,
        "KINETIS_TESTS_SUBPROCESS": "1",
        "PYTHONPATH": str(ROOT),
        "KINETIS_TESTS_TASKS_CONNECTION": backend.connection,
    }
    command = [
        sys.executable,
        "-m",
        "django",
        "queue_work",
        "--settings=tests.settings",
        f"--connection={backend.connection}",
        f"--queue={tq}",
        "-v",
        "0",
    ]
    first = subprocess.Popen([*command, "--sleep=1"], env=env, cwd=ROOT)
    try:
        wait_until(marker.exists, timeout=60)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    second = subprocess.run([*command, "--once", "--sleep=30"], env=env, cwd=ROOT, timeout=90)
    assert second.returncode == 0
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 2
    assert len(result.worker_ids) == 2 and result.worker_ids[0] != result.worker_ids[1]


def test_prune_deletes_only_finished_results_older_than_the_cut_off(tq: str) -> None:
    import io

    from django.core.management import CommandError, call_command

    done = task_defs.add.using(queue_name=tq).enqueue(1, 1)
    work(tq)
    waiting = task_defs.add.using(queue_name=tq).enqueue(2, 2)
    TaskResultRecord.objects.filter(pk=done.id).update(finished_at=timezone.now() - timedelta(hours=50))
    with pytest.raises(CommandError):
        call_command("queue_prune_task_results", "--hours=-1")
    out = io.StringIO()
    call_command("queue_prune_task_results", "--hours=49", stdout=out)
    assert "Deleted 1 finished" in out.getvalue()
    assert not TaskResultRecord.objects.filter(pk=done.id).exists()
    assert TaskResultRecord.objects.filter(pk=waiting.id).exists()


# -- commit and visibility (issue 12 item 3) --------------------------------------------------------


class _Rollback(Exception):
    pass


def tasks_on(connection: str, **options: object) -> dict[str, Any]:
    """A TASKS setting whose default backend runs on the KINETIS_QUEUE ``connection``."""
    return {
        "default": {
            "BACKEND": "kinetis_queue.tasks.KinetisTaskBackend",
            "QUEUES": [],
            "OPTIONS": {"CONNECTION": connection, **options},
        }
    }


class PollingWorker:
    """A real Worker polling one queue in a thread until the block ends; ``polls`` counts pop()s started."""

    def __init__(self, queue: Queue, connection: str, queue_name: str) -> None:
        self.reports: list[JobReport] = []
        self.polls = 0
        self.error: BaseException | None = None
        self.worker = Worker(queue, connection=connection, retry_base_delay=0, reporter=self.reports.append)
        self._queue_name = queue_name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.polls += 1
                self.worker.process_next(0.2, [self._queue_name])
        except BaseException as exc:
            self.error = exc
        finally:
            db_connections.close_all()

    def __enter__(self) -> PollingWorker:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        self.worker.close()
        assert not self._thread.is_alive()
        assert self.error is None, repr(self.error)


def status_of(result_id: str) -> str:
    return TaskResultRecord.objects.get(pk=result_id).status


def test_a_task_enqueued_in_a_transaction_reaches_the_worker_only_after_the_commit(
    connection: Queue, backend: Backend, tq: str
) -> None:
    """Issue 12 item 3: a worker racing an open transaction never sees the task before its result row;
    a rolled-back enqueue leaves neither a row nor a job. On SQL in the row's own database the push is
    part of the transaction; on every other store it waits for the commit."""
    connection.size(tq)  # the store's test support creates (SQS) or tracks (RabbitMQ) the queue
    with override_settings(TASKS=tasks_on(backend.connection)):
        if not backend.stores_jobs:  # sync: the push runs the task inline, so it runs at the commit
            with transaction.atomic():
                result = task_defs.add.using(queue_name=tq).enqueue(2, 3)
                assert task_defs.SEEN == [] and status_of(result.id) == "READY"
            assert task_defs.SEEN == [("add", 2, 3)] and status_of(result.id) == "SUCCESSFUL"
            return
        with PollingWorker(connection, backend.connection, tq) as worker:
            with pytest.raises(_Rollback), transaction.atomic():
                lost = task_defs.add.using(queue_name=tq).enqueue(1, 1)
                raise _Rollback
            with transaction.atomic():
                result = task_defs.add.using(queue_name=tq).enqueue(2, 3)
                assert result.status == "READY"
                if backend.id != "sql-sqlite":  # SQLite's claim waits for this transaction's write lock
                    polls = worker.polls
                    wait_until(lambda: worker.polls >= polls + 2, timeout=60)  # a whole poll after the push
                assert worker.reports == [] and task_defs.SEEN == []
                assert status_of(result.id) == "READY"
            wait_until(lambda: status_of(result.id) == "SUCCESSFUL", timeout=60)
        assert [(r.outcome, r.name) for r in worker.reports] == [(JobOutcome.SUCCEEDED, "tests.task_defs.add")]
    assert task_defs.SEEN == [("add", 2, 3)]
    assert not TaskResultRecord.objects.filter(pk=lost.id).exists()


def missing_row_job(connection: Queue, tq: str) -> tuple[str, str]:
    """Push a RunTask whose result row does not exist (yet); return (result id, job id)."""
    result_id = get_random_string(32)
    return result_id, connection.push(RunTask("tests.task_defs.add", [2, 3], {}, result_id, "default"), queue=tq)


@pytest.mark.trait("stores_jobs")
def test_a_delivery_whose_result_row_is_not_visible_is_snoozed_then_runs_once_it_is(
    connection: Queue, backend: Backend, tq: str, outcomes: list[tuple[str, dict[str, Any]]]
) -> None:
    """Never acked as done: the delivery is put back (a snooze, not a failure, whatever the cap) and the
    task runs once its row appears."""
    connection.size(tq)
    result_id, job_id = missing_row_job(connection, tq)
    reports: list[JobReport] = []
    worker = Worker(connection, connection=backend.connection, retry_base_delay=0, reporter=reports.append)
    try:
        assert worker.process_next(5, [tq])
        assert [(r.outcome, r.delay) for r in reports] == [(JobOutcome.SNOOZED, 1.0)]
        assert [name for name, _ in outcomes] == ["job_released"]
        assert task_defs.SEEN == []
        TaskResultRecord.objects.create(
            id=result_id,
            task_path="tests.task_defs.add",
            backend="default",
            queue_name=tq,
            status="READY",
            enqueued_at=timezone.now(),
            args=[2, 3],
            kwargs={},
        )
        assert worker.process_next(10, [tq])  # the same job, after its 1 s snooze
    finally:
        worker.close()
    assert [(r.outcome, r.job_id, r.attempt) for r in reports[1:]] == [(JobOutcome.SUCCEEDED, job_id, 1)]
    record = TaskResultRecord.objects.get(pk=result_id)
    assert (record.status, record.return_value) == ("SUCCESSFUL", 5)
    assert task_defs.SEEN == [("add", 2, 3)]


@pytest.mark.trait("stores_jobs")
@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_result_row_that_never_appears_fails_the_delivery_with_the_reason(
    connection: Queue, backend: Backend, tq: str
) -> None:
    connection.size(tq)
    result_id, job_id = missing_row_job(connection, tq)
    reports: list[JobReport] = []
    worker = Worker(connection, connection=backend.connection, retry_base_delay=0, reporter=reports.append)
    try:
        with override_settings(TASKS=tasks_on("sqlite", RESULT_ROW_WAIT=1)):
            assert worker.process_next(5, [tq])
            assert worker.process_next(10, [tq])
    finally:
        worker.close()
    assert [r.outcome for r in reports] == [JobOutcome.SNOOZED, JobOutcome.FAILED]
    record = FailedJob.objects.get(job_id=job_id)
    assert record.exception_class == "kinetis_queue.contrib.tasks.backend.ResultRowMissingError"
    assert f"the task result row {result_id} never became visible" in record.exception_message
    assert "the enqueueing transaction rolled back or the row was deleted" in record.exception_message
    assert task_defs.SEEN == []


@pytest.mark.logs_errors(TASKS_LOGGER, "kinetis_queue.dispatch")
def test_a_push_that_fails_after_the_commit_fails_the_result_and_keeps_later_hooks(tq: str) -> None:
    from django.conf import settings

    setting = {
        **settings.KINETIS_QUEUE,
        "CONNECTIONS": {
            **settings.KINETIS_QUEUE["CONNECTIONS"],
            "dead": {"BACKEND": "redis", "URL": "redis://127.0.0.1:9/0"},
        },
    }
    ran: list[str] = []
    with override_settings(KINETIS_QUEUE=setting, TASKS=tasks_on("dead")), transaction.atomic():
        result = task_defs.add.using(queue_name=tq).enqueue(1, 2)
        transaction.on_commit(lambda: ran.append("application hook"))
    assert ran == ["application hook"]
    result.refresh()
    assert result.status == "FAILED" and result.finished_at is not None
    assert [e.exception_class_path for e in result.errors] == ["kinetis_queue.exceptions.ConnectionFailedError"]
    assert "not pushed after the enqueueing transaction committed" in result.errors[0].traceback


# -- retrying a task that failed for good (issue 12 item 4) ------------------------------------------


@pytest.mark.trait("stores_jobs")
@pytest.mark.parametrize("how", ["queue_retry", "failed.retry"])
@pytest.mark.logs_errors(TASKS_LOGGER, "kinetis_queue.worker")
def test_retrying_a_task_that_failed_for_good_runs_it_again_and_keeps_its_history(
    connection: Queue, backend: Backend, tq: str, how: str
) -> None:
    """The retry is a new job whose attempts count from 1 again; it owns the result row, and the row
    keeps the errors and worker ids of every earlier run."""
    import io

    from django.core.management import call_command

    from kinetis_queue import failed

    connection.size(tq)
    worker = Worker(connection, connection=backend.connection, default_max_attempts=2, retry_base_delay=0)
    try:
        with override_settings(TASKS=tasks_on(backend.connection)):
            result = task_defs.fails_twice.using(queue_name=tq).enqueue()
            assert worker.process_next(5, [tq]) and worker.process_next(10, [tq])
            result.refresh()
            assert result.status == "FAILED" and len(result.errors) == 2
            record = FailedJob.objects.get(queue=tq)
            assert record.attempts == 2
            if how == "queue_retry":
                call_command("queue_retry", str(record.pk), stdout=io.StringIO())
            else:
                assert failed.retry(record.pk).ok
            assert worker.process_next(10, [tq])
    finally:
        worker.close()
    result.refresh()
    assert (result.status, result.return_value) == ("SUCCESSFUL", 3)
    assert task_defs.SEEN == [("fails_twice", 1), ("fails_twice", 2), ("fails_twice", 3)]
    assert [e.exception_class_path for e in result.errors] == ["builtins.RuntimeError"] * 2
    assert len(result.worker_ids) == 3 and result.finished_at is not None
    row = TaskResultRecord.objects.get(pk=result.id)
    assert (row.job_id, row.attempt) != (record.job_id, 2) and row.attempt == 1


# -- worker and operator output (issue 12 item 12) ---------------------------------------------------


def test_worker_lines_and_queue_failed_name_the_task_and_never_read_attempt_1_of_0(
    tq: str, caplog: pytest.LogCaptureFixture
) -> None:
    import io
    import logging

    from django.core.management import call_command

    task_defs.add.using(queue_name=tq).enqueue(1, 2)
    task_defs.explode.using(queue_name=tq).enqueue()
    out = io.StringIO()
    with caplog.at_level(logging.INFO, logger="kinetis_queue"):
        call_command(
            "queue_work",
            "--connection=sqlite",
            f"--queue={tq}",
            "--stop-when-empty",
            "--sleep=0.5",
            stdout=out,
            stderr=io.StringIO(),
        )
    lines = out.getvalue().splitlines()
    assert any(f"] tests.task_defs.add on {tq}, attempt 1: succeeded in " in line for line in lines), lines
    assert any(f"] tests.task_defs.explode on {tq}, attempt 1: failed in " in line for line in lines), lines
    logged = [r.getMessage() for r in caplog.records if r.name == "kinetis_queue.worker"]
    assert 'Job "tests.task_defs.add" succeeded (attempt 1)' in logged
    [failure] = [m for m in logged if "failed permanently" in m]
    # No MAX_ATTEMPTS anywhere: the cap is 0, and the line says what that means.
    assert failure.startswith(
        'Job "tests.task_defs.explode" failed permanently (attempt 1; no retries: max attempts is 0): ValueError'
    )
    assert "RunTask" not in out.getvalue() + "\n".join(logged) and " of 0" not in "\n".join(logged)
    listing = io.StringIO()
    call_command("queue_failed", f"--queue={tq}", stdout=listing)
    [row] = listing.getvalue().splitlines()[1:]
    assert "tests.task_defs.explode" in row and "RunTask" not in row
