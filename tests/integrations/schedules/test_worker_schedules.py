"""Every ``queue_work`` fires the declared schedules too (a thread beside the worker), each tick once across
the workers; ``--no-schedule`` and ``--once`` leave them alone, and a bad declaration stops the worker."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kinetis_queue import connections
from kinetis_queue.schedules.stores import tick_job_id
from tests.faults import procs
from tests.integrations.schedules.support import unique
from tests.support.helpers import wait_until

pytestmark = pytest.mark.timeout(120)


def _entry(schedule: str, queue: str, connection: str = "postgres", **extra: Any) -> dict[str, Any]:
    return {
        schedule: {
            "EVERY": 1,
            "JOB": "tests.jobs.Records",
            "ARGS": {"label": "tick"},
            "QUEUE": queue,
            "CONNECTION": connection,
            **extra,
        }
    }


def _worker(tmp_path: Path, entry: dict[str, Any], *args: str) -> subprocess.Popen[bytes]:
    """``queue_work`` on the postgres connection, watching a queue of its own (the ticks are left in theirs)."""
    env = procs.env(tmp_path)
    env["DJANGO_SETTINGS_MODULE"] = "tests.integrations.schedules.settings"
    env["KQ_TEST_SCHEDULE"] = json.dumps(entry)
    command = [sys.executable, "-m", "django", "queue_work", "--connection=postgres", f"--queue={unique('idle')}"]
    log = open(tmp_path / f"{unique('worker')}.log", "wb")
    try:
        return subprocess.Popen([*command, *args], env=env, cwd=procs.ROOT, stdout=log, stderr=log)
    finally:
        log.close()


def _logs(tmp_path: Path) -> str:
    return "".join(path.read_text(errors="replace") for path in sorted(tmp_path.glob("worker-*.log")))


def _pushed(queue_name: str) -> list[str]:
    queue = connections.queues["postgres"]
    ids: list[str] = []
    while reserved := queue.pop_many(0.1, [queue_name], 100):
        ids += [job.id for job in reserved.jobs]
        queue.ack_many(reserved.jobs)
    return ids


def test_two_workers_fire_each_tick_once(tmp_path: Path, queue_name: str) -> None:
    schedule = unique("every")
    workers = [_worker(tmp_path, _entry(schedule, queue_name)) for _ in range(2)]
    try:
        wait_until(lambda: _logs(tmp_path).count("Firing 1 schedule(s) here too") == 2, 60)
        first = int(time.time()) + 2  # both schedulers are looking by now
        last = first + 5
        wait_until(lambda: time.time() > last + 1.5, 30)
    finally:
        exits = procs.stop_all(workers)

    counts = Counter(_pushed(queue_name))
    per_tick = [counts[tick_job_id(schedule, tick)] for tick in range(first, last + 1)]
    assert per_tick == [1] * len(per_tick), _logs(tmp_path)
    assert exits == [0, 0]


def test_no_schedule_and_once_fire_nothing(tmp_path: Path, queue_name: str) -> None:
    schedule = unique("every")
    entry = _entry(schedule, queue_name)
    quiet = _worker(tmp_path, entry, "--no-schedule")
    try:
        wait_until(lambda: "watching" in _logs(tmp_path), 60)
        # --once pops for 2 s on an empty queue, then exits: two ticks at least come due while both run.
        once = _worker(tmp_path, entry, "--once", "--sleep=2")
        assert once.wait(60) == 0
    finally:
        assert procs.stop(quiet) == 0

    assert _pushed(queue_name) == []
    assert "Firing" not in _logs(tmp_path)


@pytest.mark.parametrize("skip_checks", [False, True], ids=["checks", "skip-checks"])
def test_a_bad_schedule_stops_the_worker_before_it_starts(tmp_path: Path, queue_name: str, skip_checks: bool) -> None:
    """The system checks refuse it (E006); with --skip-checks the worker's own load of the schedules does."""
    args = ["--skip-checks"] if skip_checks else []
    worker = _worker(tmp_path, _entry(unique("bad"), queue_name, CATCH_UP="sometimes"), *args)
    assert worker.wait(60) == 1
    log = _logs(tmp_path)
    assert "['CATCH_UP'] must be one of" in log
    assert ("the worker cannot start" in log and "--no-schedule" in log) is skip_checks
    assert "watching" not in log
