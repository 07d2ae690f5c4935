"""Four ``queue_schedule`` processes on a simulated clock (libfaketime) fire each tick exactly once, per
claim store; a scheduler SIGKILLed between claim and push (a crash point) loses no tick and doubles none.

The clock: every scheduler runs under libfaketime with the same offset, which puts it just before the
night Europe/Paris springs forward (2026-03-29 01:00 UTC); the test process reads the same simulated
time as ``time.time() + OFFSET``. The schedule is ``EVERY=1``, so a run of about 70 s covers more than
60 ticks. Each push carries the tick's job id, so draining the queue says which ticks were pushed and
how many times.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from kinetis_queue import connections
from kinetis_queue.contracts import Queue
from kinetis_queue.schedules.stores import AFTER_CLAIM, AFTER_PUSH, BEFORE_SCRIPT, tick_job_id
from tests.faults import procs
from tests.integrations.schedules.support import unique
from tests.support.helpers import wait_until

#: About 70 s per test (60 ticks of one second, real time): `make storms`, not `make test`.
pytestmark = pytest.mark.storm

#: Simulated "now" at the start of a test: a minute before Paris's 2026 spring-forward.
SIMULATED_START = datetime(2026, 3, 29, 0, 59, tzinfo=UTC).timestamp()
#: Ticks the exactly-once window must cover.
MIN_TICKS = 60
#: The Django-database claim store's timeout in these runs (simulated seconds = real seconds here).
CLAIM_TIMEOUT = 3

#: (connection, claim store the Scheduler picks for it)
STORES = [("postgres", "sql"), ("mariadb", "sql"), ("redis", "redis"), ("rabbitmq", "django-db")]


@pytest.fixture
def offset() -> float:
    return round(SIMULATED_START - time.time())


@pytest.fixture
def drained_queue(request: pytest.FixtureRequest, queue_name: str) -> Iterator[tuple[Queue, str]]:
    """The test's connection (its first parameter) built fresh, and its queue deleted afterwards (RabbitMQ)."""
    connection = request.node.callspec.params["store"][0]
    queue = connections.build(connection)
    try:
        yield queue, queue_name
    finally:
        if hasattr(queue, "delete") and queue_name in getattr(queue, "declared", ()):
            queue.delete(queue_name)
        if hasattr(queue, "dispose"):
            queue.dispose()


def _spawn(
    tmp_path: Path, entry: dict[str, Any], offset: float, crashpoint: str | None = None
) -> subprocess.Popen[bytes]:
    name = unique("proc")
    env = procs.env(tmp_path, faketime=f"{offset:+.0f}s", crashpoint=crashpoint, role="scheduler")
    env["DJANGO_SETTINGS_MODULE"] = "tests.integrations.schedules.settings"
    env["KQ_TEST_SCHEDULE"] = json.dumps(entry)
    log = open(tmp_path / f"{name}.log", "wb")
    try:
        command = [
            sys.executable,
            "-m",
            "django",
            "queue_schedule",
            "--max-sleep=0.05",
            f"--claim-timeout={CLAIM_TIMEOUT}",
        ]
        return subprocess.Popen(command, env=env, cwd=procs.ROOT, stdout=log, stderr=log)
    finally:
        log.close()


def _logs(tmp_path: Path) -> list[str]:
    return [path.read_text(errors="replace") for path in sorted(tmp_path.glob("proc-*.log"))]


def _drain(queue: Queue, name: str) -> list[str]:
    ids: list[str] = []
    empty = 0
    while empty < 2:
        reserved = queue.pop_many(0.5, [name], 100)
        if not reserved.jobs:
            empty += 1
            continue
        empty = 0
        ids += [job.id for job in reserved.jobs]
        queue.ack_many(reserved.jobs)
    return ids


def _tally(schedule: str, ids: list[str], first: int, last: int) -> dict[str, Any]:
    """Per tick of [first, last]: how many pushes carried its job id; and pushes of no tick in the range."""
    counts = Counter(ids)
    per_tick = {tick: counts.pop(tick_job_id(schedule, tick), 0) for tick in range(first, last + 1)}
    return {
        "expected": last - first + 1,
        "fired": sum(1 for n in per_tick.values() if n >= 1),
        "lost": [t for t, n in per_tick.items() if n == 0],
        "doubled": [t for t, n in per_tick.items() if n > 1],
    }


def _run(
    tmp_path: Path, offset: float, queue: Queue, queue_name: str, connection: str, crashpoints: list[str | None]
) -> tuple[str, dict[str, Any], list[int]]:
    """Run one scheduler per crashpoint entry (None: no crash) for MIN_TICKS + a margin; respawn crashed ones."""
    schedule = unique("every")
    entry = {
        schedule: {
            "EVERY": 1,
            "JOB": "tests.jobs.Records",
            "ARGS": {"label": "tick"},
            "QUEUE": queue_name,
            "CONNECTION": connection,
            "CATCH_UP": "all",
        },
        # Paris local minutes: the run crosses 01:00 UTC, when 02:00 becomes 03:00 in Paris.
        f"{schedule}-paris": {
            "CRON": "* * * * *",
            "TIMEZONE": "Europe/Paris",
            "JOB": "tests.jobs.Records",
            "ARGS": {"label": "minute"},
            "QUEUE": queue_name,
            "CONNECTION": connection,
        },
    }
    running = [(_spawn(tmp_path, entry, offset, point), point) for point in crashpoints]
    exits: list[int] = []
    try:
        wait_until(lambda: sum("Scheduler started" in log for log in _logs(tmp_path)) >= len(crashpoints), 60)
        first = int(time.time() + offset) + 3  # every scheduler is looking by now
        last = first + MIN_TICKS + 4
        while time.time() + offset < last + 2:
            for index, (process, point) in enumerate(running):
                code = process.poll()
                if code is not None:  # a crash point fired: another scheduler must complete its tick
                    exits.append(code)
                    running[index] = (_spawn(tmp_path, entry, offset, point), point)
            time.sleep(0.2)
    finally:
        for process, _ in running:
            exits.append(procs.stop(process))
    ids = _drain(queue, queue_name)
    tally = _tally(schedule, ids, first, last)
    # The Paris minute schedule's tick at the spring-forward instant (03:00 local), if the run covered it.
    switch = int(SIMULATED_START) + 60
    if first <= switch <= last:
        tally["paris_switch_pushes"] = ids.count(tick_job_id(f"{schedule}-paris", switch))
    return schedule, tally, exits


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", STORES, ids=[f"{c}-{s}" for c, s in STORES])
def test_four_schedulers_fire_each_tick_exactly_once(
    tmp_path: Path, offset: float, drained_queue: tuple[Queue, str], store: tuple[str, str]
) -> None:
    queue, queue_name = drained_queue
    _, tally, exits = _run(tmp_path, offset, queue, queue_name, store[0], [None] * 4)

    print(
        f"\n[{store[0]}/{store[1]}] ticks fired {tally['fired']}/{tally['expected']}, "
        f"lost {len(tally['lost'])}, doubled {len(tally['doubled'])}"
    )
    assert tally["expected"] >= MIN_TICKS
    assert (tally["lost"], tally["doubled"]) == ([], [])
    assert tally.get("paris_switch_pushes", 1) == 1
    assert exits == [0, 0, 0, 0]
    pushers = [log.count("pushed as job") for log in _logs(tmp_path)]
    assert sum(1 for n in pushers if n) >= 2, f"one scheduler did everything: {pushers}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", STORES, ids=[f"{c}-{s}" for c, s in STORES])
def test_a_scheduler_killed_between_claim_and_push_loses_no_tick_and_doubles_none(
    tmp_path: Path, offset: float, drained_queue: tuple[Queue, str], store: tuple[str, str]
) -> None:
    """Two schedulers die (os._exit(137)) at their 5th claim, between claim and push, and are replaced.

    Redis claims and pushes in one script: its schedulers die just before the script instead.
    """
    queue, queue_name = drained_queue
    crash = f"{BEFORE_SCRIPT if store[1] == 'redis' else AFTER_CLAIM}:5"
    _, tally, exits = _run(tmp_path, offset, queue, queue_name, store[0], [None, None, crash, crash])

    print(
        f"\n[{store[0]}/{store[1]} killed at {crash}] ticks fired {tally['fired']}/{tally['expected']}, "
        f"lost {len(tally['lost'])}, doubled {len(tally['doubled'])}, crashes {exits.count(137)}"
    )
    assert exits.count(137) >= 2
    assert (tally["lost"], tally["doubled"]) == ([], [])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", [STORES[3]], ids=["rabbitmq-django-db"])
def test_the_documented_duplicate_window_a_kill_between_push_and_mark(
    tmp_path: Path, offset: float, drained_queue: tuple[Queue, str], store: tuple[str, str]
) -> None:
    """Django-database claims: a scheduler killed after its push but before marking it pushed gets that tick
    pushed again by the scheduler that takes the claim over (same job id). Exactly that, nothing lost."""
    queue, queue_name = drained_queue
    crash = f"{AFTER_PUSH}:5"
    _, tally, exits = _run(tmp_path, offset, queue, queue_name, store[0], [None, None, None, crash])

    crashes = exits.count(137)
    print(
        f"\n[{store[0]}/{store[1]} killed after push] ticks fired {tally['fired']}/{tally['expected']}, "
        f"lost {len(tally['lost'])}, doubled {len(tally['doubled'])}, crashes {crashes}"
    )
    assert tally["lost"] == []
    assert crashes >= 1
    # Each crash doubles at most its own tick (a crash in the run's last ticks may fall outside the window).
    assert len(tally["doubled"]) <= crashes
