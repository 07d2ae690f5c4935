"""Operator commands at their edges: queue_failed filtered by connection alone, queue_clear and queue_work on a
connection with nothing to dispose, --stop-when-empty on a backend that cannot count delayed jobs,
--processes repeating a manage.py or `python -m django` command line, and queue_work on an unreachable store
or (sync) on an unmigrated database."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import override_settings

from kinetis_queue import queues
from kinetis_queue.backends.sql import SqlQueue
from kinetis_queue.contracts import Queue, QueueStats
from kinetis_queue.worker import Worker
from kinetis_queue.worker.supervisor import child_command
from tests import jobs
from tests.integrations.test_dispatch import DEAD_STORE

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_queue_failed_by_connection_alone_lists_that_connections_records_on_every_queue(queue_name: str) -> None:
    name = "c" + uuid.uuid4().hex[:12]
    a, b = queue_name + "a", queue_name + "b"
    queue = queues["sqlite"]
    for each in (a, b):
        queue.push(jobs.Fails(), queue=each, max_attempts=1)
    worker = Worker(queue, connection=name, retry_base_delay=0)
    try:
        assert worker.process_next(5, [a]) and worker.process_next(5, [b])
    finally:
        worker.close()
    queue.push(jobs.Fails(), queue=a, max_attempts=1)
    other = Worker(queue, connection=name + "x", retry_base_delay=0)
    try:
        assert other.process_next(5, [a])
    finally:
        other.close()
    lines = [line.split() for line in run("queue_failed", f"--connection={name}").splitlines()[1:]]
    assert sorted((line[3], line[4]) for line in lines) == [(name, a), (name, b)]


def test_queue_clear_on_the_sync_connection_clears_without_disposing() -> None:
    """The sync backend holds nothing and is not a DisposableQueue: clearing reports 0 and ends cleanly."""
    assert "Cleared 0 job(s) from 'default' on connection 'sync'." in run("queue_clear", "--connection=sync", "--force")


@pytest.mark.parametrize(
    ("head", "prefix"),
    [
        (["manage.py"], [sys.executable, "manage.py"]),
        ([os.path.join("lib", "site-packages", "django", "__main__.py")], [sys.executable, "-m", "django"]),
    ],
    ids=["manage.py", "python-m-django"],
)
def test_processes_repeats_the_command_line_with_one_process_each(head: list[str], prefix: list[str]) -> None:
    """Each child runs the parent's own command line (same interpreter, same arguments), --processes=1 last."""
    argv = [*head, "queue_work", "--settings=x.settings", "--processes", "3"]
    assert child_command(argv) == [*prefix, "queue_work", "--settings=x.settings", "--processes", "3", "--processes=1"]


def test_processes_and_concurrency_combine() -> None:
    """--processes N --concurrency M: each of the N children runs M slots."""
    argv = ["manage.py", "queue_work", "--processes=4", "--concurrency=8", "--prefetch=0"]
    command = child_command(argv)
    assert command[-4:] == ["--processes=4", "--concurrency=8", "--prefetch=0", "--processes=1"]


def test_queue_work_on_the_sync_connection_stops_when_empty_without_disposing() -> None:
    """The sync backend is not a DisposableQueue: the worker ends cleanly and says what it left (nothing)."""
    lines = run("queue_work", "--connection=sync", "--stop-when-empty").splitlines()
    assert lines[-2:] == [
        "Worker stopped (empty) after 0 job(s).",
        "Nothing left behind: no delayed, retrying or reserved job.",
    ]


class SizeOnly(SqlQueue):
    """The SQL backend without its own stats(): the base Queue's, which splits nothing (delayed unknown)."""

    def _stats(self, queue: str) -> QueueStats:
        return Queue._stats(self, queue)


def test_stop_when_empty_says_the_left_behind_count_is_unknown_where_the_backend_cannot_count_delayed(
    queue_name: str,
) -> None:
    entry = {"BACKEND": f"{__name__}.SizeOnly", "DATABASE": "default", "VISIBILITY_TIMEOUT": 1}
    setting = {**settings.KINETIS_QUEUE, "CONNECTIONS": {**settings.KINETIS_QUEUE["CONNECTIONS"], "sizeonly": entry}}
    queues["sqlite"].push(jobs.Noop(), queue=queue_name, delay=3600)
    try:
        with override_settings(KINETIS_QUEUE=setting):
            lines = run("queue_work", "--connection=sizeonly", f"--queue={queue_name}", "--stop-when-empty")
    finally:
        queues.clearable("sqlite").clear(queue_name)
    assert (
        lines.splitlines()[-1]
        == f"Left behind: unknown (the {SizeOnly.backend_name} backend cannot count delayed jobs)."
    )


def test_queue_work_on_an_unreachable_store_notes_it_could_not_check_the_queues_then_stops_with_an_error() -> None:
    """The start-up typo check never stops the worker: its failure is a note, and the worker's own error follows."""
    setting = {**settings.KINETIS_QUEUE, "CONNECTIONS": {**settings.KINETIS_QUEUE["CONNECTIONS"], "dead": DEAD_STORE}}
    out, err = io.StringIO(), io.StringIO()
    with override_settings(KINETIS_QUEUE=setting), pytest.raises(CommandError, match=r"Worker stopped \(error\)"):
        call_command("queue_work", "--connection=dead", "--stop-when-empty", stdout=out, stderr=err)
    assert "Note: could not check whether the watched queues exist (ConnectionFailedError)." in err.getvalue()


def test_queue_work_on_the_sync_connection_of_an_unmigrated_database_says_the_tables_are_missing(
    tmp_path: Path,
) -> None:
    """The table check runs for every backend; a queue with nothing to dispose is just left."""
    code = (
        "from django.core.management import call_command\n"
        "from django.test import override_settings\n"
        "entry = {'DEFAULT_CONNECTION': 'sync', 'CONNECTIONS': {'sync': {'BACKEND': 'sync'}}}\n"
        "with override_settings(KINETIS_QUEUE=entry):\n"
        "    call_command('queue_work', '--once', '--connection=sync')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KINETIS_TESTS_EMPTY_DB": str(tmp_path / "never-migrated.sqlite3")}
    result = subprocess.run(
        [sys.executable, "-m", "django", "shell", "-c", code, "--settings=tests.unmigrated_settings"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert result.returncode == 1
    assert "CommandError: the kinetis_queue tables are missing in database 'default'" in result.stderr
    assert "run `manage.py migrate`" in result.stderr
    assert "Worker on connection" not in result.stdout
