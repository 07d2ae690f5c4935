"""A forgotten ``migrate`` (issue 12 item 11): push(), queue_work and queue_status say that the kinetis_queue
tables are missing and to run ``manage.py migrate``, and ``check --database`` warns (kinetis_queue.W004).

The commands run in subprocesses on tests/unmigrated_settings.py: an empty SQLite file as the default
database. On PostgreSQL, in-process, a schema without the tables stands for the unmigrated database.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connections as db_connections
from django.db import transaction

from kinetis_queue import connections
from kinetis_queue.exceptions import QueueTablesMissingError
from tests import jobs

ROOT = Path(__file__).resolve().parents[2]
MISSING = "the kinetis_queue tables are missing in database 'default'"


@pytest.fixture
def empty_db(tmp_path: Path) -> Path:
    return tmp_path / "never-migrated.sqlite3"


def manage(empty_db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KINETIS_TESTS_EMPTY_DB": str(empty_db)}
    return subprocess.run(
        [sys.executable, "-m", "django", *args, "--settings=tests.unmigrated_settings"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )


def test_push_says_the_tables_are_missing(empty_db: Path) -> None:
    result = manage(
        empty_db,
        "shell",
        "-c",
        "from kinetis_queue import queues; from tests.jobs import Noop; queues.default().push(Noop())",
    )
    assert result.returncode != 0
    assert f"QueueTablesMissingError: {MISSING} (kinetis_queue_jobs): run `manage.py migrate`" in result.stderr


@pytest.mark.parametrize("command", [["queue_work", "--once", "--sleep=0.1"], ["queue_status"]])
def test_the_commands_say_the_tables_are_missing(empty_db: Path, command: list[str]) -> None:
    result = manage(empty_db, *command)
    assert result.returncode == 1
    assert f"CommandError: {MISSING}" in result.stderr and "run `manage.py migrate`" in result.stderr
    assert "Traceback" not in result.stderr


def test_check_database_warns_and_migrate_is_not_stopped_by_it(empty_db: Path) -> None:
    plain = manage(empty_db, "check")  # no --database: the databases the app writes to (test_forgotten_migrate.py)
    assert plain.returncode == 0 and f"(kinetis_queue.W004) {MISSING}" in plain.stderr
    checked = manage(empty_db, "check", "--database", "default")
    assert checked.returncode == 0
    assert f"(kinetis_queue.W004) {MISSING}" in checked.stderr
    migrated = manage(empty_db, "migrate", "--verbosity=0")
    assert migrated.returncode == 0, migrated.stderr
    assert "kinetis_queue.W004" not in manage(empty_db, "check", "--database", "default").stderr
    status = manage(empty_db, "queue_status")
    assert status.returncode == 0, status.stderr


@pytest.fixture
def unmigrated_schema() -> Iterator[str]:
    """A PostgreSQL schema without the tables; the test's connection searches it first."""
    db = db_connections["postgres"]
    schema = "kq_unmigrated"
    with db.cursor() as cursor:
        cursor.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}")
    try:
        yield schema
    finally:
        db.close()  # drops any search_path the test set on the session
        with db.cursor() as cursor:
            cursor.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.mark.parametrize("in_transaction", [False, True], ids=["autocommit", "inside-atomic"])
def test_a_postgres_push_says_the_tables_are_missing(unmigrated_schema: str, in_transaction: bool) -> None:
    """Inside atomic() the failed INSERT aborts the transaction, so introspection cannot confirm: the
    database's own words ("relation ... does not exist") decide."""
    queue = connections.build("postgres")
    db = db_connections["postgres"]
    try:
        if in_transaction:
            with pytest.raises(QueueTablesMissingError) as raised, transaction.atomic(using="postgres"):
                with db.cursor() as cursor:
                    cursor.execute(f"SET LOCAL search_path TO {unmigrated_schema}")
                queue.push(jobs.Noop())
        else:
            with db.cursor() as cursor:
                cursor.execute(f"SET search_path TO {unmigrated_schema}")
            with pytest.raises(QueueTablesMissingError) as raised:
                queue.push(jobs.Noop())
    finally:
        queue.dispose()
    assert str(raised.value) == (
        "the kinetis_queue tables are missing in database 'postgres' (kinetis_queue_jobs): "
        "run `manage.py migrate --database postgres`"
    )
