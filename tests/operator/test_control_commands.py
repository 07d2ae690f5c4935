"""queue_cancel, queue_pause and queue_resume (kinetis_queue.control); queue_status's PAUSED column and JSON;
queue_prune's cancellations. Every argument is checked before anything is printed or written."""

from __future__ import annotations

import io
import json
import uuid
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from kinetis_queue import connections
from kinetis_queue.control import ALL_QUEUES, all_paused, pause, paused_queues, resume
from kinetis_queue.models import Cancellation, PausedQueue
from kinetis_queue.worker import Worker
from tests import jobs
from tests.operator.test_failed import manage


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


# -- queue_cancel -------------------------------------------------------------------------------------


def test_queue_cancel_removes_a_waiting_sql_job(queue_name: str) -> None:
    queue = connections.queues["sqlite"]
    job_id = queue.push(jobs.Noop(), queue=queue_name)
    out = run("queue_cancel", job_id, "--connection=sqlite")
    assert out == f"Job {job_id} of connection 'sqlite' removed: it was waiting and will not run.\n"
    assert queue.size(queue_name) == 0
    assert not Cancellation.objects.filter(job_id=job_id).exists()


def test_queue_cancel_tells_the_worker_holding_a_job(queue_name: str) -> None:
    queue = connections.queues["sqlite"]
    job_id = queue.push(jobs.Noop(), queue=queue_name)
    held = queue.pop(5, [queue_name])
    assert held is not None and held.id == job_id
    out = run("queue_cancel", job_id)  # the default connection: sqlite
    assert "cancelled: a worker holds it, and its JobContext.cancelled becomes true" in out
    assert Cancellation.objects.filter(connection="sqlite", job_id=job_id).exists()
    queue.ack(held)


def test_queue_cancel_records_a_job_on_a_store_that_cannot_look_it_up(queue_name: str) -> None:
    pytest.importorskip("redis", reason="a core-only install has no Redis client")
    queue = connections.queues["redis"]
    job_id = queue.push(jobs.Noop(), queue=queue_name)
    out = run("queue_cancel", job_id, "--connection=redis")
    assert "recorded (redis cannot look a job up by id), so a worker skips it when it meets it" in out
    assert Cancellation.objects.filter(connection="redis", job_id=job_id).exists()
    connections.queues.clearable("redis").clear(queue_name)


def test_queue_cancel_of_a_job_the_store_does_not_hold_exits_1_and_records_nothing() -> None:
    job_id = uuid.uuid4().hex
    out = io.StringIO()
    with pytest.raises(CommandError, match=f"job {job_id} is not in the store of connection 'postgres'"):
        call_command("queue_cancel", job_id, "--connection=postgres", stdout=out, stderr=io.StringIO())
    assert out.getvalue() == ""
    assert not Cancellation.objects.filter(job_id=job_id).exists()


# -- queue_pause and queue_resume -------------------------------------------------------------------------


def test_queue_pause_and_resume_say_what_changed_and_are_idempotent(queue_name: str) -> None:
    paused = f"Queue '{queue_name}' of connection 'postgres' paused: its workers take none of its jobs"
    assert run("queue_pause", queue_name, "--connection=postgres").startswith(paused)
    assert run("queue_pause", queue_name, "--connection=postgres") == (
        f"Queue '{queue_name}' of connection 'postgres' was paused already: nothing changed.\n"
    )
    assert queue_name in paused_queues("postgres") and queue_name not in paused_queues("sqlite")
    assert run("queue_resume", queue_name, "--connection=postgres") == (
        f"Queue '{queue_name}' of connection 'postgres' resumed: its workers take its jobs again within about "
        "a second.\n"
    )
    assert run("queue_resume", queue_name, "--connection=postgres") == (
        f"Queue '{queue_name}' of connection 'postgres' was not paused: nothing changed.\n"
    )
    assert queue_name not in paused_queues("postgres")


def test_queue_pause_without_a_connection_pauses_on_the_default_one(queue_name: str) -> None:
    run("queue_pause", queue_name)
    try:
        assert queue_name in paused_queues("sqlite") and queue_name in paused_queues()
    finally:
        run("queue_resume", queue_name)
    assert queue_name not in paused_queues()


def test_queue_pause_all_holds_every_queue_of_the_connection_new_ones_included(queue_name: str) -> None:
    """queue_pause --all: no worker of the connection takes a job of any queue, one first pushed to while the pause
    holds included, and queue_status says so; queue_resume --all lifts it and the single pauses with it."""
    other = f"{queue_name}-new"
    pause(queue_name, "postgres")
    assert run("queue_pause", "--all", "--connection=postgres").startswith(
        "Every queue of connection 'postgres' paused, new ones included"
    )
    try:
        assert run("queue_pause", "--all", "--connection=postgres") == (
            "Every queue of connection 'postgres' was paused already: nothing changed.\n"
        )
        assert all_paused("postgres") and not all_paused("sqlite")
        assert ALL_QUEUES not in paused_queues("postgres")
        connection = connections.queues["postgres"]
        job_id = connection.push(jobs.Noop(), queue=other)
        held = Worker(connection, recorder=None)
        try:
            assert held.process_next(0.5, [other]) is False  # held: nothing taken
        finally:
            held.close()
        figures = json.loads(run("queue_status", "--connection=postgres", f"--queue={other}", "--json"))
        [connection_figures] = figures["connections"]
        assert connection_figures["all_paused"] is True and connection_figures["queues"][0]["paused"] is True
        assert "Every queue of postgres is paused" in run("queue_status", "--connection=postgres", f"--queue={other}")

        assert run("queue_resume", "--all", "--connection=postgres").startswith(
            "Every queue of connection 'postgres' resumed"
        )
        worker = Worker(connection, recorder=None)
        try:
            assert worker.process_next(10, [other]) is True
        finally:
            worker.close()
    finally:
        resume(ALL_QUEUES, "postgres")
    assert not all_paused("postgres") and queue_name not in paused_queues("postgres")  # the single pause went too
    assert run("queue_resume", "--all", "--connection=postgres") == (
        "No queue of connection 'postgres' was paused: nothing changed.\n"
    )
    assert connection.size(other) == 0 and job_id


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["queue_cancel"], "the following arguments are required"),
        (["queue_cancel", "abc"], "job id 'abc' is invalid: a job id is 32 lowercase hex digits"),
        (["queue_cancel", "A" * 32], "is invalid"),
        (["queue_cancel", "0" * 32, "--connection=Bad"], "connection 'Bad' is invalid"),
        (["queue_cancel", "0" * 32, "--connection=nosuch"], "not configured"),
        (["queue_pause"], "the following arguments are required"),
        (["queue_pause", "ok", "--all"], r"QUEUE, or --all \(not both\)"),
        (["queue_pause", "bad name"], "queue name 'bad name' is invalid"),
        (["queue_pause", "ok", "--connection=Bad"], "connection 'Bad' is invalid"),
        (["queue_pause", "ok", "--connection=nosuch"], "not configured"),
        (["queue_pause", "ok", "--connection=sync"], "runs each job inside push"),
        (["queue_resume", "a,b"], "queue name 'a,b' is invalid"),
        (["queue_resume", "ok", "--connection=sync"], "runs each job inside push"),
    ],
)
def test_bad_arguments_are_rejected_before_any_output_or_write(args: list[str], message: str) -> None:
    before = (Cancellation.objects.count(), PausedQueue.objects.count())
    out = io.StringIO()
    with pytest.raises(CommandError, match=message):
        call_command(*args, stdout=out, stderr=io.StringIO())
    assert out.getvalue() == ""
    assert (Cancellation.objects.count(), PausedQueue.objects.count()) == before


def test_exit_statuses_from_the_shell() -> None:
    missing = manage("queue_cancel", uuid.uuid4().hex, "--connection=sqlite")
    assert (missing.returncode, missing.stdout) == (1, "")
    assert "is not in the store of connection 'sqlite'" in missing.stderr
    bad = manage("queue_pause", "bad name")
    assert (bad.returncode, bad.stdout) == (2, "")


# -- queue_status and queue_prune ---------------------------------------------------------------------


def test_queue_status_shows_a_paused_queue_even_with_no_job(queue_name: str) -> None:
    queue = connections.queues["sqlite"]
    queue.push(jobs.Noop(), queue=queue_name)
    empty = queue_name + "-empty"
    pause(queue_name, "sqlite")
    pause(empty, "sqlite")
    try:
        figures = json.loads(run("queue_status", "--connection=sqlite", "--json"))
        table = run("queue_status", "--connection=sqlite").splitlines()
        listed = json.loads(run("queue_status", "--connection=sqlite", f"--queue={queue_name}-other", "--json"))
    finally:
        resume(queue_name, "sqlite")
        resume(empty, "sqlite")
        connections.queues.clearable("sqlite").clear(queue_name)
    rows = {row["queue"]: row for row in figures["connections"][0]["queues"]}
    assert (rows[queue_name]["paused"], rows[queue_name]["ready"]) == (True, 1)
    assert (rows[empty]["paused"], rows[empty]["waiting"]) == (True, 0)
    assert table[0].split()[-1] == "PAUSED"
    cells = {line.split()[2]: line.split() for line in table[1:]}
    assert cells[queue_name][-1] == cells[empty][-1] == "yes"
    assert [row["paused"] for row in listed["connections"][0]["queues"]] == [False]


def test_queue_prune_deletes_the_cancellations_older_than_its_hours() -> None:
    old, recent = uuid.uuid4().hex, uuid.uuid4().hex
    Cancellation.objects.create(connection="redis", job_id=old)
    Cancellation.objects.create(connection="redis", job_id=recent)
    Cancellation.objects.filter(job_id=old).update(cancelled_at=timezone.now() - timedelta(hours=200))
    Cancellation.objects.filter(job_id=recent).update(cancelled_at=timezone.now() - timedelta(hours=100))
    out = run("queue_prune")  # 168 hours by default
    assert "cancellation(s) older than 168 hour(s)" in out
    assert set(Cancellation.objects.filter(job_id__in=[old, recent]).values_list("job_id", flat=True)) == {recent}
    run("queue_prune", "--hours=99")
    assert not Cancellation.objects.filter(job_id=recent).exists()
