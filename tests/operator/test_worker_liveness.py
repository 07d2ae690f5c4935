"""Issue 27 item 1: a liveness check local to the worker's process (queue_work --heartbeat-file, queue_health
--self) that asks neither the store nor the database nor the other workers, unlike the connection-wide check."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from kinetis_queue.contracts import QueuedJob
from kinetis_queue.observability.liveness import HeartbeatFile
from tests.faults import procs
from tests.settings import KINETIS_QUEUE
from tests.support.helpers import wait_until

#: Every connection pointing at a closed port: the store is down for everyone.
STORES_DOWN = {
    **KINETIS_QUEUE,
    "DEFAULT_CONNECTION": "down",
    "CONNECTIONS": {"down": {"BACKEND": "redis", "URL": "redis://127.0.0.1:9/0", "SOCKET_TIMEOUT": 1}},
}


def _self_check(path: Path, *extra: str) -> str:
    out = io.StringIO()
    call_command("queue_health", "--self", f"--heartbeat-file={path}", *extra, stdout=out)
    return out.getvalue()


def test_queue_health_self_passes_on_a_fresh_heartbeat_with_the_store_down_and_no_query(tmp_path: Path) -> None:
    path = tmp_path / "heartbeat"
    path.touch()
    with override_settings(KINETIS_QUEUE=STORES_DOWN):
        with pytest.raises(CommandError, match="unhealthy: down"):  # the connection-wide check: for readiness
            call_command("queue_health", "--connection=down", "--no-workers", stdout=io.StringIO())
        captures = [CaptureQueriesContext(connections[alias]) for alias in connections]
        for capture in captures:
            capture.__enter__()
        try:
            out = _self_check(path)
        finally:
            for capture in captures:
                capture.__exit__(None, None, None)
    assert out == "self: ok (the heartbeat is fresh)\n"
    assert [query for capture in captures for query in capture.captured_queries] == []


def test_queue_health_self_fails_on_a_stale_or_missing_heartbeat_saying_why(tmp_path: Path) -> None:
    path = tmp_path / "heartbeat"
    path.touch()
    old = time.time() - 600
    os.utime(path, (old, old))
    out = io.StringIO()
    with pytest.raises(CommandError, match="unhealthy: this worker"):
        call_command("queue_health", "--self", f"--heartbeat-file={path}", "--max-age=60", stdout=out)
    assert out.getvalue().startswith(f"self: failing: the heartbeat file {path} is 6")
    assert out.getvalue().endswith("s old (more than --max-age 60s)\n")
    assert _self_check(path, "--max-age=3600") == "self: ok (the heartbeat is fresh)\n"

    out = io.StringIO()
    with pytest.raises(CommandError, match="unhealthy: this worker"):
        call_command("queue_health", "--self", f"--heartbeat-file={tmp_path / 'none'}", stdout=out)
    assert out.getvalue() == (
        f"self: failing: no heartbeat file at {tmp_path / 'none'} "
        f"(is the worker started with --heartbeat-file {tmp_path / 'none'}?)\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--self"], "--self needs --heartbeat-file PATH"),
        (["--self", "--heartbeat-file=x", "--connection=sqlite"], "--self checks this worker's heartbeat file only"),
        (["--heartbeat-file=x"], "--heartbeat-file and --max-age go with --self"),
    ],
)
def test_queue_health_self_arguments_are_checked(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("queue_health", *args, stdout=io.StringIO())


def test_a_busy_worker_is_alive_while_its_loop_waits_for_a_slot(tmp_path: Path) -> None:
    """Every slot on a long job: the loop does not turn, yet the worker is alive (busy, not stuck)."""
    hook = HeartbeatFile(tmp_path / "heartbeat", poll_wait=1)
    hook._last_turn = time.monotonic() - hook.grace - 1  # its loop last turned longer ago than it may
    assert hook.alive() is False
    job = cast(QueuedJob, SimpleNamespace(id=uuid.uuid4().hex))
    hook.started(job)
    assert hook.alive() is True
    hook.ended(job)
    assert hook.alive() is False
    hook.active(("default",))  # a turn of the loop
    assert hook.alive() is True


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _fails(path: Path, max_age: str) -> bool:
    try:
        _self_check(path, f"--max-age={max_age}")
    except CommandError:
        return True
    return False


@pytest.mark.timeout(120)
def test_a_worker_keeps_its_heartbeat_fresh_and_a_frozen_worker_fails_its_own_check(
    tmp_path: Path, queue_name: str
) -> None:
    path = tmp_path / "heartbeat"
    command = [
        sys.executable,
        "-m",
        "django",
        "queue_work",
        "--connection=sqlite",
        f"--queue={queue_name}",
        "--sleep=1",
        f"--heartbeat-file={path}",
    ]
    log = open(tmp_path / "worker.log", "wb")
    worker = subprocess.Popen(command, env=procs.env(tmp_path), cwd=procs.ROOT, stdout=log, stderr=log)
    log.close()
    try:
        first = wait_until(lambda: _mtime(path), 60)
        wait_until(lambda: _mtime(path) > first, 30)  # touched again: idle, its loop turns
        assert _self_check(path, "--max-age=30") == "self: ok (the heartbeat is fresh)\n"
        worker.send_signal(signal.SIGSTOP)  # frozen: nothing of it runs
        try:
            wait_until(lambda: _fails(path, "2"), 30, interval=0.2)
        finally:
            worker.send_signal(signal.SIGCONT)
        wait_until(lambda: not _fails(path, "30"), 30, interval=0.2)  # running again: fresh again
    except BaseException:
        procs.stop(worker)  # the first failure is the finding, not the exit status after it
        raise
    # A clean stop even when the SIGTERM comes while the worker still starts its hooks (the heartbeat is
    # touched from the first hook on): tests/conformance/test_worker_lifecycle.py.
    assert procs.stop(worker) == 0, (tmp_path / "worker.log").read_text()


def test_queue_work_refuses_a_heartbeat_file_it_cannot_write_or_shared_by_processes(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match=r"--heartbeat-file .*/missing/heartbeat: cannot write it"):
        call_command(
            "queue_work", "--connection=sqlite", f"--heartbeat-file={tmp_path / 'missing' / 'heartbeat'}", "--once"
        )
    with pytest.raises(CommandError, match="--heartbeat-file tells the liveness of one worker process"):
        call_command("queue_work", "--connection=sqlite", f"--heartbeat-file={tmp_path / 'h'}", "--processes=2")
