"""Redis backend across real processes: a SIGKILLed worker loses nothing; competing poppers never share a job.

The worker and popper subprocesses use the ``redis`` connection of tests/settings.py: the run's key
prefix (they inherit the run id) and a visibility timeout of 1 s; each test has its own queue.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import redis

from kinetis_queue import connections
from kinetis_queue.backends.redis import RedisQueue
from tests.jobs import HangsOnFirstAttempt, Noop
from tests.settings import REDIS_URL
from tests.support.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
CONNECTION = "redis"


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "KINETIS_TESTS_SUBPROCESS": "1",
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
    }


def _worker_command(queue: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "django",
        "queue_work",
        "--settings=tests.settings",
        f"--connection={CONNECTION}",
        f"--queue={queue}",
        "-v",
        "0",
        *extra,
    ]


def _build() -> RedisQueue:
    queue = connections.build(CONNECTION)
    assert isinstance(queue, RedisQueue)
    return queue


def _stored(queue: RedisQueue, name: str) -> tuple[int, int, int]:
    """(pending, delayed, leased) on the server for queue ``name``."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = queue.keys(name)
        return client.llen(keys.pending), client.zcard(keys.delayed), client.zcard(keys.leased)
    finally:
        client.close()


def test_a_sigkilled_worker_loses_nothing(queue_name: str, tmp_path: Path) -> None:
    """Contract: Reservation and recovery (a worker that dies mid-job is reclaimed by any worker's next pop()
    once its lease expires, with attempts + 1)."""
    queue = _build()
    marker, done = tmp_path / "running", tmp_path / "done"
    queue.push(HangsOnFirstAttempt(str(marker), str(done)), queue=queue_name, max_attempts=5)

    first = subprocess.Popen(_worker_command(queue_name, "--sleep=1"), env=_env(), cwd=ROOT)
    try:
        wait_until(marker.exists, timeout=60)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    assert first.returncode == -signal.SIGKILL
    assert not done.exists()
    assert _stored(queue, queue_name) == (0, 0, 1)  # the dead worker's lease, with nobody renewing it

    # A second real worker reclaims the job once the 1 s lease has expired, and completes it.
    second = subprocess.run(
        _worker_command(queue_name, "--once", "--sleep=30"),
        env=_env(),
        cwd=ROOT,
        timeout=90,
        capture_output=True,
        text=True,
    )
    assert second.returncode == 0, second.stderr
    assert done.read_text() == "2"  # the job ran again, as attempt 2, and only once more
    assert _stored(queue, queue_name) == (0, 0, 0)
    assert queue.size(queue_name) == 0
    queue.dispose()


def test_competing_processes_never_reserve_a_job_twice(queue_name: str) -> None:
    """Contract: At-least-once delivery (Redis reserves what a pop() finds in one atomic step)."""
    queue = _build()
    pushed = {queue.push(Noop(), queue=queue_name) for _ in range(3000)}
    poppers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.popper", CONNECTION, queue_name],
            env=_env(),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    settled: list[str] = []
    shares = []
    for popper in poppers:
        out, _ = popper.communicate(timeout=120)
        assert popper.returncode == 0
        settled.extend(json.loads(out))
        shares.append(len(json.loads(out)))
    assert len(settled) == len(set(settled)), "a job was delivered to two processes"
    assert sum(1 for share in shares if share) >= 2, f"the processes never competed: {shares}"
    assert set(settled) == pushed
    assert _stored(queue, queue_name) == (0, 0, 0)
    queue.dispose()
