"""SQL backend across real processes: a SIGKILLed worker loses nothing; competing poppers never share a job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connections as db_connections

from kinetis_queue import connections
from tests.jobs import HangsOnFirstAttempt, Noop, SignalsWhileRunning
from tests.support.backends import SQL_BACKENDS, Backend
from tests.support.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "KINETIS_TESTS_SUBPROCESS": "1",
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
    }


def _worker_command(backend: Backend, queue: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "django",
        "queue_work",
        "--settings=tests.settings",
        f"--connection={backend.connection}",
        f"--queue={queue}",
        "-v",
        "0",
        *extra,
    ]


def _rows(backend: Backend, queue: str) -> int:
    with db_connections[backend.database or "default"].cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM kinetis_queue_jobs WHERE queue = %s", [queue])
        return int(cursor.fetchone()[0])


@pytest.mark.parametrize("backend", SQL_BACKENDS, ids=lambda b: b.id)
def test_a_sigkilled_worker_loses_nothing(backend: Backend, queue_name: str, tmp_path: Path) -> None:
    """Contract: A worker that dies mid-job is reclaimed once the reservation passes the visibility timeout."""
    queue = connections.build(backend.connection)
    marker, done = tmp_path / "running", tmp_path / "done"
    job_id = queue.push(HangsOnFirstAttempt(str(marker), str(done)), queue=queue_name, max_attempts=5)

    first = subprocess.Popen(_worker_command(backend, queue_name, "--sleep=1"), env=_env(), cwd=ROOT)
    try:
        wait_until(marker.exists, timeout=60)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    assert first.returncode == -signal.SIGKILL
    assert not done.exists()

    # A second real worker takes the job over once the 1 s visibility timeout has passed.
    second = subprocess.run(
        _worker_command(backend, queue_name, "--once", "--sleep=30"),
        env=_env(),
        cwd=ROOT,
        timeout=90,
        capture_output=True,
        text=True,
    )
    assert second.returncode == 0, second.stderr
    assert done.read_text() == "2"  # the job ran again, as attempt 2
    assert _rows(backend, queue_name) == 0
    assert queue.size(queue_name) == 0
    del job_id


@pytest.mark.parametrize("backend", SQL_BACKENDS, ids=lambda b: b.id)
def test_competing_processes_never_reserve_a_job_twice(backend: Backend, queue_name: str) -> None:
    """Contract: two workers popping at the same instant never receive the same delivery."""
    queue = connections.build(backend.connection)
    pushed = {queue.push(Noop(), queue=queue_name) for _ in range(240)}
    poppers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.popper", backend.connection, queue_name],
            env=_env(),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    settled: list[str] = []
    for popper in poppers:
        out, _ = popper.communicate(timeout=120)
        assert popper.returncode == 0
        settled.extend(json.loads(out))
    assert len(settled) == len(set(settled)), "a job was delivered to two processes"
    assert set(settled) == pushed
    assert _rows(backend, queue_name) == 0


@pytest.mark.parametrize("backend", SQL_BACKENDS[:1], ids=lambda b: b.id)
def test_sigterm_stops_the_worker_between_jobs(backend: Backend, queue_name: str, tmp_path: Path) -> None:
    """Contract: Shutdown. The running job finishes and is acked; the next one is left for later."""
    queue = connections.build(backend.connection)
    marker, release, done = tmp_path / "running", tmp_path / "release", tmp_path / "done"
    queue.push(SignalsWhileRunning(str(marker), str(release), str(done)), queue=queue_name)
    queue.push(Noop(), queue=queue_name)
    worker = subprocess.Popen(_worker_command(backend, queue_name, "--sleep=1"), env=_env(), cwd=ROOT)
    wait_until(marker.exists, timeout=60)
    worker.send_signal(signal.SIGTERM)
    release.touch()
    assert worker.wait(timeout=60) == 0
    assert done.read_text() == "1"
    assert _rows(backend, queue_name) == 1  # the Noop was never taken
    assert queue.size(queue_name) == 1


@pytest.mark.parametrize("backend", SQL_BACKENDS[:1], ids=lambda b: b.id)
def test_sigterm_at_concurrency_8_lets_every_running_job_finish(
    backend: Backend, queue_name: str, tmp_path: Path
) -> None:
    """Three jobs run at once when SIGTERM comes: the worker reserves nothing more, waits for all three
    (released only after the signal), acks them and exits 0."""
    queue = connections.build(backend.connection)
    release = tmp_path / "release"
    names = [(tmp_path / f"running{i}", tmp_path / f"done{i}") for i in range(3)]
    for marker, done in names:
        queue.push(SignalsWhileRunning(str(marker), str(release), str(done)), queue=queue_name)
    worker = subprocess.Popen(
        _worker_command(backend, queue_name, "--sleep=1", "--concurrency=8"), env=_env(), cwd=ROOT
    )
    wait_until(lambda: all(marker.exists() for marker, _ in names), timeout=60)
    worker.send_signal(signal.SIGTERM)
    queue.push(Noop(), queue=queue_name)  # pushed after the signal: never taken
    release.touch()
    assert worker.wait(timeout=60) == 0
    assert [done.read_text() for _, done in names] == ["1", "1", "1"]
    assert _rows(backend, queue_name) == 1
    assert queue.size(queue_name) == 1


@pytest.mark.parametrize("concurrency", [1, 8])
@pytest.mark.parametrize("backend", SQL_BACKENDS[:1], ids=lambda b: b.id)
def test_a_second_signal_exits_at_once_without_settling(
    backend: Backend, queue_name: str, tmp_path: Path, concurrency: int
) -> None:
    """DESIGN.md §4: a second signal while a job runs exits at once; the backend redelivers the job."""
    queue = connections.build(backend.connection)
    marker, release, done = tmp_path / "running", tmp_path / "release", tmp_path / "done"
    queue.push(SignalsWhileRunning(str(marker), str(release), str(done)), queue=queue_name)
    worker = subprocess.Popen(
        _worker_command(backend, queue_name, "--sleep=1", f"--concurrency={concurrency}"), env=_env(), cwd=ROOT
    )
    wait_until(marker.exists, timeout=60)
    worker.send_signal(signal.SIGTERM)
    worker.send_signal(signal.SIGINT)
    assert worker.wait(timeout=60) in (128 + signal.SIGINT, 128 + signal.SIGTERM)
    assert not done.exists()
    release.touch()
    # Unsettled: the reservation expires and the job comes back as attempt 2.
    job = queue.pop(30, [queue_name])
    assert job is not None and job.attempts == 2
    queue.ack(job)
