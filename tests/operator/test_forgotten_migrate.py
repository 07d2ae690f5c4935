"""A forgotten ``migrate`` is named by every entry point a new user meets first: ``queue_failed``, a django.tasks
``enqueue()``, a plain ``manage.py check``; and the very first ``migrate`` does not warn that migrate should run.

Subprocesses on tests/unmigrated_settings.py (an SQLite file where ``migrate`` never ran), as in test_tables.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.operator.test_tables import MISSING, empty_db, manage

__all__ = ["empty_db"]  # the fixture, shared with test_tables.py

pytestmark = pytest.mark.core


@pytest.mark.parametrize(
    ("command", "table"),
    [
        (["queue_failed"], "kinetis_queue_failed_jobs"),
        (["queue_retry", "1"], "kinetis_queue_failed_jobs"),
        (["queue_forget", "1"], "kinetis_queue_failed_jobs"),
        (["queue_prune"], "kinetis_queue_failed_jobs"),
        (["queue_prune_task_results"], "kinetis_queue_task_results"),
        (["queue_restart"], "kinetis_queue_restart_markers"),
    ],
    ids=lambda v: v[0] if isinstance(v, list) else None,
)
def test_the_commands_say_the_tables_are_missing(empty_db: Path, command: list[str], table: str) -> None:
    result = manage(empty_db, *command)
    assert result.returncode == 1, result.stdout + result.stderr
    assert MISSING in result.stderr and table in result.stderr and "run `manage.py migrate`" in result.stderr, (
        result.stderr
    )
    assert "Traceback" not in result.stderr and "OperationalError" not in result.stderr, result.stderr


def test_a_task_enqueue_says_the_tables_are_missing(empty_db: Path) -> None:
    result = manage(empty_db, "shell", "-c", "from tests.task_defs import add; add.enqueue(1, 2)")
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]  # what the user reads first: the error the traceback ends with
    assert last.endswith(f"QueueTablesMissingError: {MISSING} (kinetis_queue_task_results): run `manage.py migrate`")


@pytest.mark.parametrize("file_exists", [False, True], ids=["no-database-file", "empty-database-file"])
def test_a_plain_check_names_the_forgotten_migrate(empty_db: Path, file_exists: bool) -> None:
    if file_exists:
        empty_db.touch()
    result = manage(empty_db, "check")
    assert result.returncode == 0, result.stderr
    assert f"(kinetis_queue.W004) {MISSING}" in result.stderr and "run `manage.py migrate`" in result.stderr


def test_the_first_migrate_is_quiet_and_then_check_is_too(empty_db: Path) -> None:
    migrated = manage(empty_db, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert "Applying kinetis_queue.0001_initial... OK" in migrated.stdout
    assert "W004" not in migrated.stdout + migrated.stderr and "WARNING" not in migrated.stderr, migrated.stderr
    checked = manage(empty_db, "check")
    assert checked.returncode == 0 and "W004" not in checked.stderr, checked.stderr
