"""How stored rows name themselves (admin pages, shell, logs): identity only, never argument values."""

from __future__ import annotations

from kinetis_queue.contrib.tasks.results import TaskResultRecord
from kinetis_queue.models import QueuedJobRecord

SECRET = "s3cr3t-VALUE"


def test_queued_job_row_names_class_queue_and_id() -> None:
    row = QueuedJobRecord(job_class="app.jobs.Send", queue="mail", job_id="j-1", args=f'{{"to": "{SECRET}"}}')
    assert str(row) == "app.jobs.Send on mail (j-1)"


def test_task_result_row_names_task_id_and_status() -> None:
    row = TaskResultRecord(id="r-1", task_path="app.tasks.send", status="READY", args=[SECRET], kwargs={"k": SECRET})
    assert str(row) == "app.tasks.send r-1 (READY)"
