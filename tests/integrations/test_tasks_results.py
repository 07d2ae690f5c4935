"""django.tasks results (issue 19 part 4): pruning from a schedule as from the command, and a sync
``refresh()`` called inside an event loop."""

from __future__ import annotations

import asyncio
import io
from datetime import timedelta

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from kinetis_queue import queues
from kinetis_queue.contrib.tasks.compat import TaskResultStatus
from kinetis_queue.contrib.tasks.prune import PruneTaskResults
from kinetis_queue.models import TaskResultRecord
from kinetis_queue.schedules import declaration
from kinetis_queue.worker import JobOutcome, JobReport, Worker
from tests import task_defs

PRUNE = "kinetis_queue.contrib.tasks.prune.PruneTaskResults"


def results_of_ages(queue_name: str) -> dict[str, str]:
    """Four results: SUCCESSFUL 50 h ago, FAILED 50 h ago, SUCCESSFUL 1 h ago, and one still READY."""
    now = timezone.now()
    ids = {}
    for label, status, finished in (
        ("old_ok", TaskResultStatus.SUCCESSFUL, now - timedelta(hours=50)),
        ("old_failed", TaskResultStatus.FAILED, now - timedelta(hours=50)),
        ("recent", TaskResultStatus.SUCCESSFUL, now - timedelta(hours=1)),
        ("waiting", TaskResultStatus.READY, None),
    ):
        record = TaskResultRecord.objects.create(
            id=f"{queue_name}-{label}",
            task_path="tests.task_defs.add",
            backend="default",
            queue_name=queue_name,
            status=status,
            enqueued_at=now - timedelta(hours=60),
            finished_at=finished,
        )
        ids[label] = record.id
    return ids


def remaining(queue_name: str) -> set[str]:
    return {
        r.split("-", 1)[1] for r in TaskResultRecord.objects.filter(queue_name=queue_name).values_list("id", flat=True)
    }


def test_a_schedule_can_name_the_prune_job_and_it_prunes_what_the_command_would(queue_name: str) -> None:
    entry = {"EVERY": 3600, "JOB": PRUNE, "ARGS": {"hours": 49}, "QUEUE": queue_name, "CONNECTION": "sqlite"}
    with override_settings(KINETIS_QUEUE={**settings.KINETIS_QUEUE, "SCHEDULE": {"prune-task-results": entry}}):
        [schedule] = declaration.load()
    assert schedule.job_class is PruneTaskResults
    results_of_ages(queue_name)
    queues["sqlite"].push(PruneTaskResults(hours=49), queue=queue_name)
    reports: list[JobReport] = []
    worker = Worker(queues["sqlite"], connection="sqlite", reporter=reports.append)
    try:
        assert worker.process_next(5, [queue_name])
    finally:
        worker.close()
    assert [r.outcome for r in reports] == [JobOutcome.SUCCEEDED]
    assert remaining(queue_name) == {"recent", "waiting"}  # finished 50 h ago: gone, whatever the outcome


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_the_prune_job_refuses_a_bad_age(queue_name: str) -> None:
    results_of_ages(queue_name)
    queues["sqlite"].push(PruneTaskResults(hours=-1), queue=queue_name)
    reports: list[JobReport] = []
    worker = Worker(queues["sqlite"], connection="sqlite", default_max_attempts=1, reporter=reports.append)
    try:
        assert worker.process_next(5, [queue_name])
    finally:
        worker.close()
    assert [(r.outcome, r.error) for r in reports] == [(JobOutcome.FAILED, "InvalidQueueArgumentError")]
    assert remaining(queue_name) == {"old_ok", "old_failed", "recent", "waiting"}


def test_the_command_prunes_finished_results_only(queue_name: str) -> None:
    results_of_ages(queue_name)
    out = io.StringIO()
    call_command("queue_prune_task_results", "--hours=49", stdout=out)
    assert remaining(queue_name) == {"recent", "waiting"}
    call_command("queue_prune_task_results", "--hours=0", stdout=out)
    assert remaining(queue_name) == {"waiting"}  # READY (and RUNNING) results are never pruned


@pytest.mark.parametrize("how", ["refresh", "get_result"])
def test_a_sync_read_inside_an_event_loop_works(queue_name: str, how: str) -> None:
    """Django's TaskResult.refresh() is sync, and Django's own tests call it from async code."""
    result = task_defs.add.using(queue_name=queue_name).enqueue(1, 2)
    TaskResultRecord.objects.filter(pk=result.id).update(status="SUCCESSFUL", return_value=3)

    async def read() -> object:
        if how == "refresh":
            result.refresh()
            return result.return_value
        return task_defs.add.get_result(result.id).return_value

    assert asyncio.run(read()) == 3
    job = queues["sqlite"].pop(5, [queue_name])
    assert job is not None
    queues["sqlite"].ack(job)
