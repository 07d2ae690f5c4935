"""Failed jobs from the operator's side: the record's traceback, queue_failed, queue_retry, queue_forget,
queue_prune (SqueHub's "Failed jobs and restart", under the Kinetis contract's recording rules)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from kinetis_queue import failed, queues
from kinetis_queue.models import FailedJob
from kinetis_queue.worker import Worker
from tests import jobs, operator_jobs

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cr3t-TOKEN-operator"


def run(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


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


def fail_for_good(job: object, queue_name: str, connection: str = "sqlite") -> FailedJob:
    """Push ``job`` with max_attempts=1 and let a real worker give up on it."""
    queue = queues[connection]
    job_id = queue.push(job, queue=queue_name, max_attempts=1)  # type: ignore[arg-type]
    worker = Worker(queue, connection=None if connection == "sqlite" else connection)
    try:
        assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()
    return FailedJob.objects.get(job_id=job_id)


def make_record(queue_name: str, **fields: object) -> FailedJob:
    values: dict[str, object] = {
        "connection": None,
        "queue": queue_name,
        "job_id": "0" * 32,
        "job_class": "tests.jobs.Records",
        "args": json.dumps({"label": "from-a-record"}),
        "max_attempts": 3,
        "attempts": 3,
        "exception_class": "builtins.RuntimeError",
        "exception_message": "boom",
    }
    values.update(fields)
    return FailedJob.objects.create(**values)


# -- the record ------------------------------------------------------------------------------------


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_the_record_keeps_the_traceback_and_the_raw_arguments(queue_name: str) -> None:
    """Contract: record() stores class, raw arguments, counters, exception class and message (+ traceback)."""
    record = fail_for_good(jobs.Fails("visible", token=SECRET), queue_name)
    assert record.traceback.startswith("Traceback (most recent call last):")
    assert "RuntimeError: deliberate failure" in record.traceback
    assert "tests/jobs.py" in record.traceback
    assert SECRET not in record.traceback and SECRET not in record.exception_message
    # The raw arguments stay: a retry needs them.
    assert json.loads(record.args) == {"label": "visible", "token": SECRET}


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_sensitive_value_quoted_by_the_exception_is_scrubbed_from_the_record(queue_name: str) -> None:
    record = fail_for_good(operator_jobs.LeaksSecret("visible-label", SECRET), queue_name)
    assert SECRET not in record.exception_message
    assert SECRET not in record.traceback
    assert record.exception_message == "could not use token [redacted] for visible-label"
    assert "could not use token [redacted]" in record.traceback


# -- queue_failed ------------------------------------------------------------------------------------


def test_queue_failed_lists_safe_metadata_only(queue_name: str) -> None:
    record = make_record(
        queue_name,
        args=json.dumps({"label": "ARGUMENT-VALUE"}),
        exception_message="MESSAGE-TEXT",
        traceback="TRACEBACK-TEXT",
    )
    out, _ = run("queue_failed", f"--queue={queue_name}")
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "FAILED", "AT", "CONNECTION", "QUEUE", "CLASS", "EXCEPTION", "ATTEMPTS"]
    assert lines[1].split()[0] == str(record.pk)
    assert "tests.jobs.Records" in lines[1] and "RuntimeError" in lines[1] and "3/3" in lines[1]
    assert "(default)" in lines[1] and queue_name in lines[1]
    for secret in ("ARGUMENT-VALUE", "MESSAGE-TEXT", "TRACEBACK-TEXT", "boom"):
        assert secret not in out


def test_queue_failed_shows_at_most_100_rows_newest_first(queue_name: str) -> None:
    FailedJob.objects.bulk_create(
        [
            FailedJob(
                queue=queue_name,
                job_id=f"{i:032x}",
                job_class="tests.jobs.Noop",
                args="{}",
                attempts=1,
                exception_class="builtins.RuntimeError",
            )
            for i in range(105)
        ]
    )
    out, _ = run("queue_failed", f"--queue={queue_name}")
    rows = [line for line in out.splitlines()[1:] if not line.startswith("(")]
    assert len(rows) == 100
    assert "the newest 100 shown" in out
    ids = [int(row.split()[0]) for row in rows]
    assert ids == sorted(ids, reverse=True)


def test_queue_failed_filters_by_connection(queue_name: str) -> None:
    make_record(queue_name, connection="postgres")
    make_record(queue_name, connection=None)
    out, _ = run("queue_failed", f"--queue={queue_name}", "--connection=postgres")
    assert len(out.splitlines()) == 2 and "postgres" in out.splitlines()[1]
    out, _ = run("queue_failed", "--queue=qnothinghere0")
    assert out == "No failed jobs.\n"


# -- queue_retry -------------------------------------------------------------------------------------


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_queue_retry_pushes_again_with_attempts_reset_and_removes_the_record(queue_name: str) -> None:
    record = fail_for_good(jobs.Fails("again", token=SECRET), queue_name)
    queue = queues["sqlite"]
    assert queue.size(queue_name) == 0
    out, _ = run("queue_retry", str(record.pk))
    assert f"Failed job {record.pk} pushed again as job " in out
    assert not FailedJob.objects.filter(pk=record.pk).exists()
    job = queue.pop(5, [queue_name])
    assert job is not None
    assert (job.job_class, job.args, job.attempts, job.max_attempts) == (
        "tests.jobs.Fails",
        {"label": "again", "token": SECRET},
        1,
        1,
    )
    assert job.id != record.job_id and out.split()[-1].rstrip(".") == job.id
    queue.ack(job)


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_retry_of_a_unique_class_takes_its_key_again_and_answers_the_holder(queue_name: str) -> None:
    """docs/failed-jobs.md: a class whose unique_for is set takes its key again, as push() would; the key
    held meanwhile, the retry is answered with the holder's id, pushes nothing, and the record goes."""

    def fail(context: object) -> None:
        raise RuntimeError("deliberate")

    jobs.CALLBACK[:] = [fail]
    try:
        record = fail_for_good(jobs.UniqueCallsBack(), queue_name)
    finally:
        jobs.CALLBACK[:] = []
    queue = queues["sqlite"]
    holder = queue.push(jobs.UniqueCallsBack(), queue=queue_name)  # the final failure freed the key
    outcome = failed.retry(record.pk)
    assert outcome.job_id == holder and outcome.error is None
    assert queue.size(queue_name) == 1
    assert not FailedJob.objects.filter(pk=record.pk).exists()
    job = queue.pop(5, [queue_name])
    assert job is not None and job.id == holder
    queue.ack(job)


def test_queue_retry_pushes_to_the_records_connection(queue_name: str) -> None:
    record = make_record(queue_name, connection="postgres")
    run("queue_retry", str(record.pk))
    job = queues["postgres"].pop(5, [queue_name])
    assert job is not None and job.args["label"] == "from-a-record" and job.max_attempts == 3
    queues["postgres"].ack(job)
    assert queues["sqlite"].size(queue_name) == 0


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"job_class": "os.system"}, "JobReconstructionError: job class 'os.system' cannot be resolved: it is not a"),
        ({"args": json.dumps({"label": "x", "injected": 1})}, "matches no __init__ parameter"),
        ({"args": json.dumps({})}, "required argument label was not stored"),
        ({"args": '{"label": NaN}'}, "MalformedQueuedJobDataError"),
        ({"args": '{"label": "a", "label": "b"}'}, "repeats a key"),
        ({"args": "[1, 2]"}, "args is not an object"),
        ({"queue": "bad name!"}, "InvalidQueueArgumentError"),
        ({"max_attempts": -4}, "InvalidQueueArgumentError"),
        ({"connection": "gone"}, "'gone'] is not configured"),
    ],
    ids=["class", "unknown-arg", "missing-arg", "nan", "duplicate-key", "not-a-map", "queue", "cap", "connection"],
)
def test_queue_retry_of_a_tampered_record_pushes_nothing_and_says_why(
    queue_name: str, fields: dict[str, object], reason: str
) -> None:
    record = make_record(queue_name, **fields)
    with pytest.raises(CommandError, match="1 of 1 failed job"):
        call_command("queue_retry", str(record.pk), stdout=io.StringIO(), stderr=(err := io.StringIO()))
    assert f"Failed job {record.pk} was not retried: " in err.getvalue()
    assert reason in err.getvalue()
    assert FailedJob.objects.filter(pk=record.pk).exists()
    assert queues["sqlite"].size(queue_name) == 0


def test_queue_retry_of_several_ids_retries_what_it_can_and_exits_non_zero(queue_name: str) -> None:
    good = make_record(queue_name)
    missing = FailedJob.objects.order_by("-pk").values_list("pk", flat=True).first() + 1000  # type: ignore[operator]
    result = manage("queue_retry", str(good.pk), str(missing))
    assert result.returncode == 1
    assert f"Failed job {good.pk} pushed again" in result.stdout
    assert f"there is no failed job with id {missing}" in result.stderr
    assert queues["sqlite"].size(queue_name) == 1
    queues.clearable("sqlite").clear(queue_name)


def test_retry_of_a_record_whose_push_fails_keeps_the_record(queue_name: str) -> None:
    """SqueHub: a failed requeue leaves the failed row intact."""
    record = make_record(queue_name, job_class="tests.jobs.Fails", args=json.dumps({"label": "x", "token": "t"}))
    with pytest.MonkeyPatch.context() as patch:

        def refuse(*args: object, **kwargs: object) -> None:
            raise ConnectionError("store unreachable")

        patch.setattr(type(queues["sqlite"]), "_push", refuse)
        outcome = failed.retry(record.pk)
    assert not outcome.ok and outcome.error == "ConnectionError: store unreachable"
    assert FailedJob.objects.filter(pk=record.pk).exists()
    assert queues["sqlite"].size(queue_name) == 0


# -- queue_forget and queue_prune -----------------------------------------------------------------


def test_queue_forget_removes_one_record(queue_name: str) -> None:
    record, other = make_record(queue_name), make_record(queue_name)
    out, _ = run("queue_forget", str(record.pk))
    assert out == f"Failed job {record.pk} forgotten.\n"
    assert not FailedJob.objects.filter(pk=record.pk).exists()
    assert FailedJob.objects.filter(pk=other.pk).exists()
    with pytest.raises(CommandError, match=f"no failed job with id {record.pk}"):
        run("queue_forget", str(record.pk))


def test_queue_prune_removes_records_strictly_older_than_the_hours(queue_name: str) -> None:
    now = timezone.now()
    old, recent = make_record(queue_name), make_record(queue_name)
    FailedJob.objects.filter(pk=old.pk).update(failed_at=now - timedelta(hours=200))
    FailedJob.objects.filter(pk=recent.pk).update(failed_at=now - timedelta(hours=100))
    out, _ = run("queue_prune")  # the default is 168 hours
    assert out.startswith("Pruned ") and "older than 168 hour(s)" in out
    assert not FailedJob.objects.filter(pk=old.pk).exists()
    assert FailedJob.objects.filter(pk=recent.pk).exists()
    run("queue_prune", "--hours=99.5")
    assert not FailedJob.objects.filter(pk=recent.pk).exists()


def test_prune_keeps_a_record_exactly_at_the_cutoff(queue_name: str) -> None:
    now = timezone.now()
    at_cutoff, older = make_record(queue_name), make_record(queue_name)
    FailedJob.objects.filter(pk=at_cutoff.pk).update(failed_at=now - timedelta(hours=5))
    FailedJob.objects.filter(pk=older.pk).update(failed_at=now - timedelta(hours=5, microseconds=1))
    failed.prune(5, now=now)
    assert FailedJob.objects.filter(pk=at_cutoff.pk).exists()
    assert not FailedJob.objects.filter(pk=older.pk).exists()


# -- bad arguments ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["queue_retry"], "the following arguments are required"),
        (["queue_retry", "abc"], "not a failed-job id"),
        (["queue_retry", "0"], "not a failed-job id"),
        (["queue_retry", "1", "-5"], "not a failed-job id|unrecognized"),
        (["queue_forget"], "the following arguments are required"),
        (["queue_forget", "1.5"], "not a failed-job id"),
        (["queue_forget", "1", "2"], "unrecognized arguments"),
        (["queue_prune", "--hours=0"], "positive"),
        (["queue_prune", "--hours=-3"], "positive"),
        (["queue_prune", "--hours=nan"], "positive"),
        (["queue_prune", "--hours=week"], "must be a number"),
        (["queue_failed", "--connection=Bad"], "connection"),
        (["queue_failed", "--queue=bad name"], "invalid"),
    ],
)
def test_bad_arguments_are_rejected_before_any_output_or_io(args: list[str], message: str, queue_name: str) -> None:
    record = make_record(queue_name)
    FailedJob.objects.filter(pk=record.pk).update(failed_at=timezone.now() - timedelta(days=365))
    before = FailedJob.objects.count()
    out = io.StringIO()
    with pytest.raises(CommandError, match=message):
        call_command(*args, stdout=out, stderr=io.StringIO())
    assert out.getvalue() == ""
    assert FailedJob.objects.count() == before


def test_bad_arguments_exit_non_zero_from_the_shell() -> None:
    for args in (["queue_retry", "x"], ["queue_forget"], ["queue_prune", "--hours=0"], ["queue_failed", "--queue=a b"]):
        result = manage(*args)
        assert result.returncode != 0, args
        assert result.stdout == ""
