"""Issue 27 item 24: queue_work's lines say what is true: a paused queue is named as paused, deferrals are
not counted as jobs, nothing left behind is said so, the default queue is not a --queue typo, and a job's
own INFO lines show at the default verbosity."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from kinetis_queue import queues
from kinetis_queue.control import pause, resume
from kinetis_queue.limits import slot_key, slot_store_of
from tests import jobs, operator_jobs

ROOT = Path(__file__).resolve().parents[2]


def run_both(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("queue_work", "--no-color", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


@pytest.fixture
def held_limit() -> Iterator[None]:
    """OneAtATimeSlowly's only slot on the sqlite connection, held by someone else: its deliveries are deferred."""
    limit = operator_jobs.OneAtATimeSlowly.concurrency_limit
    assert limit is not None
    store = slot_store_of(queues["sqlite"])
    key = slot_key("sqlite", limit.key_of(operator_jobs.OneAtATimeSlowly()))
    slot = store.acquire(key, 1, uuid.uuid4().hex, 600)
    assert slot is not None
    yield
    store.release(slot)


def test_a_worker_on_a_paused_queue_says_it_is_paused_not_empty(queue_name: str) -> None:
    queue = queues["sqlite"]
    queue.push(jobs.Noop(), queue=queue_name)
    pause(queue_name, "sqlite")
    try:
        out, err = run_both("--connection=sqlite", f"--queue={queue_name}", "--stop-when-empty", "--sleep=0.2")
    finally:
        resume(queue_name, "sqlite")
    assert (
        f"Note: queue '{queue_name}' is paused on connection 'sqlite': this worker takes none of its jobs until "
        f"it is resumed (queue_resume {queue_name} --connection sqlite)."
    ) in err.splitlines()
    assert out.splitlines()[-2:] == [
        f"Worker stopped (nothing to take: {queue_name} paused) after 0 job(s).",
        f"Left behind: 1 ready in paused queue(s) {queue_name}; --stop-when-empty does not wait for them.",
    ]
    assert queue.size(queue_name) == 1
    queues.clearable("sqlite").clear(queue_name)


def test_deferrals_are_counted_apart_from_jobs(queue_name: str, held_limit: None) -> None:
    """A delivery given back at its concurrency limit is not a job done: two deliveries, one job."""
    queue = queues["sqlite"]
    queue.push(jobs.Noop(), queue=queue_name)
    queue.push(operator_jobs.OneAtATimeSlowly(), queue=queue_name)
    out, _ = run_both("--connection=sqlite", f"--queue={queue_name}", "--stop-when-empty", "--sleep=0.2")
    assert out.splitlines()[-2:] == [
        "Worker stopped (empty) after 1 job(s) and 1 deferral(s) (deliveries given back unstarted, no attempt "
        "charged).",
        "Left behind: 1 delayed or retrying job(s); --stop-when-empty does not wait for them.",
    ]
    queues.clearable("sqlite").clear(queue_name)


def test_nothing_left_behind_is_said_so_not_counted_as_zero(queue_name: str) -> None:
    queues["sqlite"].push(jobs.Noop(), queue=queue_name)
    out, _ = run_both("--connection=sqlite", f"--queue={queue_name}", "--stop-when-empty", "--sleep=0.2")
    assert out.splitlines()[-2:] == [
        "Worker stopped (empty) after 1 job(s).",
        "Nothing left behind: no delayed, retrying or reserved job.",
    ]


def test_without_queue_the_note_names_the_default_queue_not_a_typo() -> None:
    """No --queue given: the worker watches 'default'; the note says so instead of suspecting a typo."""
    fresh = {"BACKEND": "redis", "URL": settings.KINETIS_QUEUE["CONNECTIONS"]["redis"]["URL"]}
    fresh["PREFIX"] = f"kq-{uuid.uuid4().hex[:12]}"  # a store where nothing was ever pushed
    setting = {**settings.KINETIS_QUEUE, "CONNECTIONS": {**settings.KINETIS_QUEUE["CONNECTIONS"], "fresh": fresh}}
    with override_settings(KINETIS_QUEUE=setting):
        queues["fresh"].push(jobs.Noop(), queue="elsewhere")
        try:
            _, err = run_both("--connection=fresh", "--stop-when-empty", "--sleep=0.2")
        finally:
            queues.clearable("fresh").clear("elsewhere")
    notes = [line for line in err.splitlines() if line.startswith("Note:")]
    assert notes == [
        "Note: no --queue given, so this worker watches queue 'default' alone; nothing was ever pushed to it on "
        "connection 'fresh' as far as the redis backend can tell (known queues: elsewhere)."
    ]


def test_a_jobs_own_info_lines_show_at_the_default_verbosity_and_not_at_0(queue_name: str) -> None:
    """context.logger.info() is the job's own output, as a task logger's: shown at -v 1, the worker's INFO not."""
    queue = queues["sqlite"]
    env = {**os.environ, "KINETIS_TESTS_SUBPROCESS": "1", "PYTHONPATH": str(ROOT)}
    command = [
        sys.executable,
        "-m",
        "django",
        "queue_work",
        "--settings=tests.operator_settings",
        "--connection=sqlite",
    ]
    command += [f"--queue={queue_name}", "--stop-when-empty", "--sleep=0.5"]
    queue.push(operator_jobs.LogsProgress(), queue=queue_name)
    normal = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert normal.returncode == 0, normal.stderr
    assert " INFO kinetis_queue.worker.job LogsProgress is half way" in normal.stderr
    assert "succeeded (attempt 1)" not in normal.stderr  # the worker's own INFO lines wait for -v 2
    queue.push(operator_jobs.LogsProgress(), queue=queue_name)
    quiet = subprocess.run([*command, "-v", "0"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == ""
