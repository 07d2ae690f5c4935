"""A task whose push fails leaves no READY row behind: gone at once, or FAILED after the commit."""

from __future__ import annotations

import copy
import socket
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.db import transaction
from django.test import override_settings

from kinetis_queue.models import TaskResultRecord
from tests import task_defs
from tests.support.stray_logs import TASKS_LOGGER


def closed_port() -> int:
    """A local port nothing listens on (bound, then released): a connection there is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def down() -> Iterator[int]:
    """The default task backend pushes to a Redis connection where no server listens (on the port given)."""
    port = closed_port()
    setting = copy.deepcopy(settings.KINETIS_QUEUE)
    setting["CONNECTIONS"]["down"] = {"BACKEND": "redis", "URL": f"redis://127.0.0.1:{port}/0"}
    tasks = {
        "default": {
            "BACKEND": "kinetis_queue.tasks.KinetisTaskBackend",
            "QUEUES": [],
            "OPTIONS": {"CONNECTION": "down"},
        }
    }
    with override_settings(KINETIS_QUEUE=setting, TASKS=tasks):
        yield port


def rows() -> set[str]:
    return set(TaskResultRecord.objects.filter(task_path=task_defs.add.module_path).values_list("id", flat=True))


def test_a_push_that_fails_at_once_deletes_the_result_row(down: int) -> None:
    before = rows()
    with pytest.raises(Exception, match=f":{down}\\b"):  # the dead server's refusal, raised to the caller
        task_defs.add.enqueue(1, 2)
    assert rows() == before


@pytest.mark.logs_errors(TASKS_LOGGER, "kinetis_queue.dispatch")
def test_a_push_failing_after_commit_leaves_a_row_deleted_meanwhile_deleted(down: int) -> None:
    """The commit hook marks a READY row FAILED; a row the transaction deleted is not brought back."""
    before = rows()
    with transaction.atomic():
        result = task_defs.add.enqueue(1, 2)
        TaskResultRecord.objects.filter(pk=result.id).delete()
    assert rows() == before
    with transaction.atomic():
        kept = task_defs.add.enqueue(3, 4)
    assert TaskResultRecord.objects.get(pk=kept.id).status == "FAILED"
    TaskResultRecord.objects.filter(pk=kept.id).delete()
