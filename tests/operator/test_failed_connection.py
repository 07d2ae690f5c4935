"""Failed-job records name the connection that ran the job, even when it was the default (issue 12, item 9).

A record that stored NULL for "the default connection" followed DEFAULT_CONNECTION around: after the
setting changed, a retry pushed the job to another store and the failed counts moved to another
connection. The worker now stores the connection's real name, so neither moves.
"""

from __future__ import annotations

import copy
import io

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from kinetis_queue import failed, queues
from kinetis_queue.models import FailedJob
from kinetis_queue.observability import status
from kinetis_queue.worker import Worker
from tests import jobs

#: The test settings' DEFAULT_CONNECTION, and another SQL store to move the default to.
DEFAULT, OTHER = "sqlite", "postgres"


def _moved_default() -> dict[str, object]:
    setting = copy.deepcopy(settings.KINETIS_QUEUE)
    setting["DEFAULT_CONNECTION"] = OTHER
    return setting


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_worker_built_without_connection_records_the_real_name(queue_name: str) -> None:
    job_id = queues.default().push(jobs.Fails("x"), queue=queue_name, max_attempts=1)
    worker = Worker(queues.default())  # no connection=: the queue knows the name it was built under
    try:
        assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()
    record = FailedJob.objects.get(job_id=job_id)
    assert record.connection == DEFAULT
    assert worker.connection == DEFAULT


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_queue_work_without_connection_records_the_default_connections_name(queue_name: str) -> None:
    job_id = queues[DEFAULT].push(jobs.Fails("x"), queue=queue_name, max_attempts=1)
    call_command(
        "queue_work", f"--queue={queue_name}", "--once", "--sleep=1", stdout=io.StringIO(), stderr=io.StringIO()
    )
    assert FailedJob.objects.get(job_id=job_id).connection == DEFAULT


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_changing_the_default_connection_moves_neither_a_retry_nor_the_failed_counts(queue_name: str) -> None:
    job_id = queues.default().push(jobs.Fails("again"), queue=queue_name, max_attempts=1)
    worker = Worker(queues.default())
    try:
        assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()
    record = FailedJob.objects.get(job_id=job_id)
    assert failed.failed_counts(DEFAULT)[(DEFAULT, queue_name)] == 1

    with override_settings(KINETIS_QUEUE=_moved_default()):
        assert queues.default_name == OTHER
        after = failed.failed_counts(OTHER)
        assert after.get((DEFAULT, queue_name)) == 1 and (OTHER, queue_name) not in after
        figures = {f.connection: f for f in status.collect(queues=[queue_name])}
        assert [q.failed for q in figures[DEFAULT].queues] == [1]
        assert [q.failed for q in figures[OTHER].queues] == [0]
        outcome = failed.retry(record.pk)
        assert outcome.ok, outcome.error
        # Back to the store the job failed on, not to the new default.
        assert queues[OTHER].size(queue_name) == 0
        again = queues[DEFAULT].pop(5, [queue_name])
        assert again is not None and again.id == outcome.job_id and again.args["label"] == "again"
        queues[DEFAULT].ack(again)


def test_a_record_written_before_names_were_stored_still_means_the_default(queue_name: str) -> None:
    """Records with NULL (written by earlier versions) keep meaning "the default connection"."""
    record = FailedJob.objects.create(
        connection=None,
        queue=queue_name,
        job_id="0" * 32,
        job_class="tests.jobs.Records",
        args='{"label": "old"}',
        attempts=1,
        exception_class="builtins.RuntimeError",
    )
    assert failed.failed_counts(DEFAULT)[(DEFAULT, queue_name)] == 1
    outcome = failed.retry(record.pk)
    assert outcome.ok, outcome.error
    job = queues.default().pop(5, [queue_name])
    assert job is not None and job.id == outcome.job_id
    queues.default().ack(job)
