"""kinetis_queue.tasks: Django's own @task API run by the kinetis worker (issue 8)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from kinetis_queue import queues
from kinetis_queue.models import FailedJob, TaskResultRecord
from kinetis_queue.tasks import WORKER_ID, KinetisTaskBackend, _fenced_update
from kinetis_queue.tasks_compat import (
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    default_task_backend,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from kinetis_queue.worker import Worker
from tests import task_defs
from tests.conftest import wait_until

ROOT = Path(__file__).resolve().parents[1]


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
    assert backend.supports_async_task and not backend.supports_priority
    # __init__ touches nothing: a bad connection surfaces in the system check, naming the key.
    unbuilt = KinetisTaskBackend("other", {"OPTIONS": {"CONNECTION": "nosuch"}})
    assert [e.id for e in unbuilt.check()] == ["kinetis_queue.E101"]
    assert "CONNECTION" in unbuilt.check()[0].msg


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
    assert FailedJob.objects.filter(queue=tq, job_class="kinetis_queue.tasks.RunTask").count() == 1
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
        task_defs.add.using(priority=5)


def not_discovered() -> None:
    """A module-level function of a module no worker imports at start-up (not a jobs/tasks module, not in IMPORTS)."""


def test_enqueue_accepts_only_a_task_a_worker_will_have_imported() -> None:
    """Issue 12 item 7: a task's module must be one discovery imports, else no worker could resolve it."""
    from kinetis_queue.tasks_compat import task

    with pytest.raises(InvalidTask, match="KINETIS_QUEUE\\['IMPORTS'\\]") as raised:
        task(not_discovered)
    assert "'tests.test_tasks.not_discovered'" in str(raised.value)
    assert task_defs.add.module_path == "tests.task_defs.add"  # listed in IMPORTS (tests/settings.py): accepted


def test_an_unknown_result_id_does_not_exist() -> None:
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("123")


def test_a_run_whose_delivery_was_replaced_cannot_write(tq: str) -> None:
    """Results are fenced by the delivery attempt."""
    result = task_defs.add.using(queue_name=tq).enqueue(1, 2)
    TaskResultRecord.objects.filter(pk=result.id).update(attempt=2, status="RUNNING")

    def overwrite(record: TaskResultRecord) -> None:
        record.status = "SUCCESSFUL"

    assert _fenced_update(result.id, 1, overwrite) is None
    assert TaskResultRecord.objects.get(pk=result.id).status == "RUNNING"
    assert _fenced_update(result.id, 2, overwrite) is not None
    job = queues["sqlite"].pop(5, [tq])
    assert job is not None
    queues["sqlite"].ack(job)


@pytest.mark.trait("stores_jobs")
def test_a_sigkilled_worker_leaves_no_task_in_limbo(
    connection: Any, backend: Any, tq: str, tmp_path: Path
) -> None:
    """The inverse of django-tasks-db's kill test, on every store: a worker SIGKILLed mid-task; the task
    runs again (after the lease; at once on RabbitMQ) as attempt 2, ends SUCCESSFUL, both worker ids kept."""
    from django.test import override_settings

    connection.size(tq)  # the store's test support creates (SQS) or tracks (RabbitMQ) the queue
    marker = tmp_path / "running"
    tasks = {"default": {"BACKEND": "kinetis_queue.tasks.KinetisTaskBackend", "QUEUES": [],
                         "OPTIONS": {"CONNECTION": backend.connection}}}
    with override_settings(TASKS=tasks):
        result = task_defs.hangs_on_first_attempt.using(queue_name=tq).enqueue(str(marker))
    env = {**os.environ, "KINETIS_TESTS_SUBPROCESS": "1", "PYTHONPATH": str(ROOT),
           "KINETIS_TESTS_TASKS_CONNECTION": backend.connection}
    command = [sys.executable, "-m", "django", "queue_work", "--settings=tests.settings",
               f"--connection={backend.connection}", f"--queue={tq}", "-v", "0"]
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
