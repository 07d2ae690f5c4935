"""A Sensitive argument of a job that fails for good appears in no log, admin page, command output, signal
payload or exception message; only the failed record's raw arguments keep it (a retry needs them)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from kinetis_queue import queues, signals
from kinetis_queue.exceptions import UnserializableJobError
from kinetis_queue.models import FailedJob
from kinetis_queue.worker import Worker
from tests import operator_jobs

ROOT = Path(__file__).resolve().parents[2]
SECRET = "pa55-SECRET-d3adb33f"


def _worker_run(queue_name: str) -> subprocess.CompletedProcess[str]:
    """queue_work at the highest verbosity, with no project logging: every line the worker can print."""
    env = {**os.environ, "KINETIS_TESTS_SUBPROCESS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "django",
            "queue_work",
            "--settings=tests.operator_settings",
            "-v",
            "3",
            "--connection=sqlite",
            f"--queue={queue_name}",
            "--stop-when-empty",
            "--sleep=0.5",
            "--backoff=0",
        ],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )


def _call(*args: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


@pytest.mark.parametrize(
    "job",
    [
        operator_jobs.TakesSecret("visible", SECRET, credentials={"nested": [SECRET]}),
        operator_jobs.LeaksSecret("visible", SECRET),  # its own exception message quotes the secret
    ],
    ids=["plain", "quoted-by-the-exception"],
)
def test_a_secret_appears_nowhere_but_the_raw_record(job: Any, queue_name: str) -> None:
    job_id = queues["sqlite"].push(job, queue=queue_name, max_attempts=2)
    result = _worker_run(queue_name)
    assert result.returncode == 0, result.stderr
    assert "failed permanently" in result.stderr and "[redacted]" in result.stderr  # the lines exist
    assert SECRET not in result.stdout + result.stderr

    record = FailedJob.objects.get(job_id=job_id)
    assert SECRET in record.args  # the raw arguments, kept for queue_retry (documented)
    assert SECRET not in record.exception_message + record.traceback

    assert SECRET not in _call("queue_failed", f"--queue={queue_name}")
    assert SECRET not in _call("queue_status", "--connection=sqlite", f"--queue={queue_name}", "--json")

    admin = User.objects.create_superuser(f"admin-{job_id[:12]}", password="x")
    client = Client()
    client.force_login(admin)
    for url in (
        reverse("admin:kinetis_queue_failedjob_changelist"),
        reverse("admin:kinetis_queue_failedjob_change", args=[record.pk]),
        reverse("admin:kinetis_queue_failedjob_history", args=[record.pk]),
    ):
        page = client.get(url)
        assert page.status_code == 200
        assert SECRET not in page.content.decode()


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_signal_payloads_carry_the_arguments_redacted(queue_name: str) -> None:
    seen: list[dict[str, Any]] = []

    def receiver(**kwargs: Any) -> None:
        seen.append(kwargs)

    for signal in (signals.job_released, signals.job_failed_permanently):
        signal.connect(receiver, weak=False)
    try:
        queues["sqlite"].push(operator_jobs.TakesSecret("visible", SECRET), queue=queue_name, max_attempts=2)
        worker = Worker(queues["sqlite"], retry_base_delay=0)
        try:
            worker.process_next(5, [queue_name])
            worker.process_next(5, [queue_name])
        finally:
            worker.close()
    finally:
        for signal in (signals.job_released, signals.job_failed_permanently):
            signal.disconnect(receiver)
    assert len(seen) == 2
    for payload in seen:
        assert payload["job"].args["token"] == "[redacted]" and payload["job"].args["label"] == "visible"
        assert SECRET not in repr(payload)
    assert json.loads(seen[1]["args"]) == {"label": "visible", "token": "[redacted]", "credentials": "[redacted]"}


def test_a_rejected_sensitive_argument_names_neither_its_value_nor_its_location(queue_name: str) -> None:
    with pytest.raises(UnserializableJobError) as raised:
        queues["sqlite"].push(operator_jobs.TakesSecret("visible", (SECRET,)), queue=queue_name)  # type: ignore[arg-type]
    assert SECRET not in str(raised.value)
    assert "argument token" in str(raised.value) and "[" not in str(raised.value).split("token")[1]
    assert queues["sqlite"].size(queue_name) == 0


def test_a_retry_error_on_a_tampered_sensitive_argument_shows_no_value(queue_name: str) -> None:
    record = FailedJob.objects.create(
        queue=queue_name,
        job_id="1" * 32,
        job_class="tests.operator_jobs.TakesSecret",
        args=json.dumps({"label": "x", "token": SECRET, "injected": SECRET}),
        attempts=1,
        exception_class="builtins.RuntimeError",
    )
    out = io.StringIO()
    err = io.StringIO()
    with pytest.raises(Exception, match="not retried"):
        call_command("queue_retry", str(record.pk), stdout=out, stderr=err)
    assert "matches no __init__ parameter" in err.getvalue()
    assert SECRET not in out.getvalue() + err.getvalue()
