"""queue_work and queue_clear: arguments validated before anything is printed or touched."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from kinetis_queue import queues
from tests import jobs

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def manage(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KINETIS_TESTS_SUBPROCESS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "django", *args, "--settings=tests.settings"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_queue_work_once_processes_one_job(queue_name: str) -> None:
    queue = queues["sqlite"]
    queue.push(jobs.Records("a"), queue=queue_name)
    queue.push(jobs.Records("b"), queue=queue_name)
    output = run("queue_work", "--connection=sqlite", f"--queue={queue_name}", "--once", "--sleep=1")
    assert "after 1 job(s)" in output
    assert [c[1] for c in jobs.CALLS] == ["a"]
    assert queue.size(queue_name) == 1


def test_queue_work_takes_queues_in_priority_order_and_stops_when_empty(queue_name: str) -> None:
    queue = queues["sqlite"]
    low, high = queue_name + "-low", queue_name + "-high"
    queue.push(jobs.Records("low"), queue=low)
    queue.push(jobs.Records("high"), queue=high)
    run("queue_work", "--connection=sqlite", f"--queue={high},{low}", "--stop-when-empty", "--sleep=0.2")
    assert [c[1] for c in jobs.CALLS] == ["high", "low"]


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_queue_work_tries_and_backoff_set_the_worker_policy(queue_name: str) -> None:
    queue = queues["sqlite"]
    queue.push(jobs.Fails(), queue=queue_name)
    run(
        "queue_work",
        "--connection=sqlite",
        f"--queue={queue_name}",
        "--stop-when-empty",
        "--sleep=0.5",
        "--tries=2",
        "--backoff=0",
    )
    assert [c[2] for c in jobs.CALLS] == [1, 2]
    assert queue.size(queue_name) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--queue=a,b,a"], "more than once"),
        (["--queue=ok,bad name"], "invalid"),
        (["--connection=Bad"], "connection"),
        (["--connection="], "connection"),
        (["--connection=nosuch"], "not configured"),
        (["--sleep=0"], "positive"),
        (["--sleep=-1"], "positive"),
        (["--tries=-1"], "0 or more"),
        (["--backoff=901"], "0 to 900"),
    ],
)
def test_queue_work_rejects_bad_arguments_before_touching_anything(
    args: list[str], message: str, queue_name: str
) -> None:
    queues["sqlite"].push(jobs.Noop(), queue="ok")
    before = queues["sqlite"].size("ok")
    out = io.StringIO()
    with pytest.raises(CommandError, match=message):
        call_command("queue_work", "--once", *args, stdout=out)
    assert out.getvalue() == ""
    assert queues["sqlite"].size("ok") == before
    queues.clearable("sqlite").clear("ok")


def test_queue_work_exits_non_zero_on_bad_arguments_from_the_shell() -> None:
    result = manage("queue_work", "--queue=a,a")
    assert result.returncode != 0
    assert result.stdout == ""
    assert "more than once" in result.stderr


def test_queue_clear_needs_force_and_clears_every_listed_queue(queue_name: str) -> None:
    queue = queues["sqlite"]
    a, b = queue_name + "a", queue_name + "b"
    for name in (a, a, b):
        queue.push(jobs.Noop(), queue=name)
    queue.push(jobs.Noop(), queue=a, delay=3600)
    with pytest.raises(CommandError, match="without --force"):
        run("queue_clear", "--connection=sqlite", f"--queue={a},{b}")
    assert queue.size(a) == 3
    output = run("queue_clear", "--connection=sqlite", f"--queue={a},{b}", "--force")
    assert f"Cleared 3 job(s) from '{a}'" in output
    assert f"Cleared 1 job(s) from '{b}'" in output
    assert queue.size(a) == queue.size(b) == 0


def test_queue_clear_validates_the_whole_list_before_clearing_any(queue_name: str) -> None:
    queue = queues["sqlite"]
    queue.push(jobs.Noop(), queue=queue_name)
    with pytest.raises(CommandError, match="invalid"):
        run("queue_clear", "--connection=sqlite", f"--queue={queue_name},bad.name", "--force")
    assert queue.size(queue_name) == 1


def test_queue_clear_checks_the_capability_first() -> None:
    custom: dict[str, Any] = {"BACKEND": "tests.support.custom_backends.NotClearable"}
    with override_settings(KINETIS_QUEUE={"DEFAULT_CONNECTION": "odd", "CONNECTIONS": {"odd": custom}}):
        # Even with a bad list and no --force, the missing capability is what is reported.
        with pytest.raises(CommandError, match="cannot clear: it is not a ClearableQueue"):
            run("queue_clear", "--queue=x")


def run_both(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_stop_when_empty_says_how_many_delayed_or_retrying_jobs_it_left_behind(queue_name: str) -> None:
    """Issue 12 item 12: --stop-when-empty does not wait for delayed jobs, and now says so."""
    queue = queues["sqlite"]
    queue.push(jobs.Noop(), queue=queue_name, delay=3600)
    queue.push(jobs.Fails(), queue=queue_name, max_attempts=2)
    output = run(
        "queue_work",
        "--connection=sqlite",
        f"--queue={queue_name}",
        "--stop-when-empty",
        "--sleep=0.2",
        "--backoff=600",
    )
    lines = output.splitlines()
    assert lines[-2] == "Worker stopped (empty) after 1 job(s)."
    assert lines[-1] == "Left behind: 2 delayed or retrying job(s); --stop-when-empty does not wait for them."
    queues.clearable("sqlite").clear(queue_name)


def test_queue_work_notes_a_queue_nothing_was_ever_pushed_to(queue_name: str) -> None:
    """A typo in --queue would otherwise idle silently: the start says so, naming the known queues."""
    from kinetis_queue.models import FailedJob

    queues["sqlite"].push(jobs.Noop(), queue=queue_name)
    typo = queue_name + "x"
    out, err = run_both(
        "queue_work", "--connection=sqlite", f"--queue={queue_name},{typo}", "--stop-when-empty", "--sleep=0.2"
    )
    notes = [line for line in err.splitlines() if line.startswith("Note:")]
    assert len(notes) == 1
    assert notes[0].startswith(
        f"Note: nothing was ever pushed to queue '{typo}' on connection 'sqlite' as far as "
        "the sql backend can tell (known queues: "
    )
    assert queue_name in notes[0] and notes[0].endswith("a typo in --queue? Watching it anyway.")
    assert "Worker stopped (empty) after 1 job(s)." in out  # and it kept working
    # A queue a failed job names is known, even with nothing waiting on it.
    FailedJob.objects.create(
        connection="sqlite",
        queue=typo,
        job_id="0" * 32,
        job_class="tests.jobs.Noop",
        args="{}",
        attempts=1,
        exception_class="builtins.RuntimeError",
    )
    _, err = run_both("queue_work", "--connection=sqlite", f"--queue={typo}", "--once", "--sleep=0.2")
    assert "Note:" not in err


@pytest.mark.trait("stores_jobs")
def test_queue_known_tells_a_queue_pushed_to_from_one_never_used(connection: Any, queue_name: str) -> None:
    """Per store: SQL and Redis, a job is there; SQS, the queue exists; RabbitMQ, it is declared."""
    import uuid

    never = "u" + uuid.uuid4().hex[:20]  # outside the test's names: the SQS test support creates none for it
    assert connection.queue_known(never) is False
    connection.push(jobs.Noop(), queue=queue_name)
    assert connection.queue_known(queue_name) is True
    assert connection.queue_known(never) is False  # asking created nothing
    job = connection.pop(5, [queue_name])
    assert job is not None
    connection.ack(job)
