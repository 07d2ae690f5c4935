"""The result-row fence on the worker: a delivery that does not own the row neither runs nor writes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.utils import timezone

from kinetis_queue import queues
from kinetis_queue.contrib.tasks.backend import RunTask
from kinetis_queue.contrib.tasks.compat import task_finished, task_started
from kinetis_queue.models import TaskResultRecord
from kinetis_queue.worker import JobOutcome, JobReport, Worker
from tests import task_defs

OTHER = "f" * 32  # the job id of another delivery of the same task


@pytest.fixture
def tq(queue_name: str) -> str:
    task_defs.SEEN.clear()
    return queue_name


@pytest.fixture
def finished() -> Iterator[list[str]]:
    """Result ids task_finished was sent for."""
    seen: list[str] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        seen.append(task_result.id)

    task_finished.connect(receiver, weak=False)
    yield seen
    task_finished.disconnect(receiver)


@pytest.fixture
def taken_over_at_start() -> Iterator[None]:
    """Once a run has started, another delivery takes its row over (as a later redelivery would)."""

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        TaskResultRecord.objects.filter(pk=task_result.id).update(job_id=OTHER, attempt=1)

    task_started.connect(receiver, weak=False)
    yield
    task_started.disconnect(receiver)


def deliver(tq: str, task_path: str, result_id: str) -> list[JobReport]:
    """Push a RunTask for ``result_id`` on the SQLite connection and let one Worker take it."""
    queues["sqlite"].push(
        RunTask(task_path, [2, 3] if task_path.endswith("add") else [], {}, result_id, "default"), queue=tq
    )
    reports: list[JobReport] = []
    worker = Worker(queues["sqlite"], connection="sqlite", retry_base_delay=0, reporter=reports.append)
    try:
        assert worker.process_next(5, [tq])
    finally:
        worker.close()
    return reports


def row(tq: str, task_path: str, **fields: Any) -> TaskResultRecord:
    return TaskResultRecord.objects.create(
        id=f"fence-{tq}",
        task_path=task_path,
        backend="default",
        queue_name=tq,
        enqueued_at=timezone.now(),
        **{"status": "READY", "args": [2, 3], "kwargs": {}, **fields},
    )


def test_a_delivery_of_a_finished_task_does_not_run_it(tq: str, finished: list[str]) -> None:
    record = row(tq, "tests.task_defs.add", status="SUCCESSFUL", job_id=OTHER, attempt=1, return_value=5)
    reports = deliver(tq, "tests.task_defs.add", record.id)
    assert [r.outcome for r in reports] == [JobOutcome.SUCCEEDED]  # acked: nothing is left to do
    assert task_defs.SEEN == [] and finished == []
    record.refresh_from_db()
    assert (record.status, record.job_id, record.return_value) == ("SUCCESSFUL", OTHER, 5)


def test_a_run_that_lost_its_row_does_not_store_its_value(
    tq: str, finished: list[str], taken_over_at_start: None
) -> None:
    record = row(tq, "tests.task_defs.add")
    deliver(tq, "tests.task_defs.add", record.id)
    assert task_defs.SEEN == [("add", 2, 3)]  # it ran: the takeover came after its start
    record.refresh_from_db()
    assert (record.status, record.job_id, record.return_value) == ("RUNNING", OTHER, None)
    assert finished == []


def test_a_run_that_lost_its_row_does_not_record_an_unstorable_value(
    tq: str, finished: list[str], taken_over_at_start: None
) -> None:
    record = row(tq, "tests.task_defs.returns_unstorable", args=[])
    deliver(tq, "tests.task_defs.returns_unstorable", record.id)
    record.refresh_from_db()
    assert (record.status, record.job_id, record.errors) == ("RUNNING", OTHER, [])
    assert finished == []
