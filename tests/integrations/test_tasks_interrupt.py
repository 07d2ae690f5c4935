"""An operator's Ctrl-C during a task stops the worker; it is not recorded as the task's failure."""

from __future__ import annotations

import signal
import threading

import pytest
from django.utils import timezone

from kinetis_queue import queues
from kinetis_queue.contrib.tasks.backend import RunTask
from kinetis_queue.contrib.tasks.compat import task
from kinetis_queue.models import TaskResultRecord
from kinetis_queue.worker import Worker
from tests import task_defs


def interrupted() -> None:
    """Stands for a task the operator's Ctrl-C lands in."""
    raise KeyboardInterrupt


interrupted.__module__ = "tests.task_defs"  # a module workers import: the task resolves there


def test_ctrl_c_in_a_task_propagates_and_records_no_error(queue_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.fail("this test needs the main thread (an operator's Ctrl-C arrives there)", pytrace=False)
    monkeypatch.setattr(task_defs, "interrupted", task(interrupted), raising=False)
    record = TaskResultRecord.objects.create(
        id=f"ctrl-c-{queue_name}",
        task_path="tests.task_defs.interrupted",
        backend="default",
        queue_name=queue_name,
        status="READY",
        enqueued_at=timezone.now(),
        args=[],
        kwargs={},
    )
    queues["sqlite"].push(RunTask("tests.task_defs.interrupted", [], {}, record.id, "default"), queue=queue_name)
    worker = Worker(queues["sqlite"], connection="sqlite", retry_base_delay=0)
    # Python's own SIGINT handler, as in process_next() called outside run(): Ctrl-C is the operator's.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            worker.process_next(5, [queue_name])
    finally:
        worker.close()
        signal.signal(signal.SIGINT, previous)
        queues.clearable("sqlite").clear(queue_name)
    record.refresh_from_db()
    assert (record.status, record.errors) == ("RUNNING", [])
