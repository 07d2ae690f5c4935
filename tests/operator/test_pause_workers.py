"""queue_pause and queue_resume reach every worker process: two real ``queue_work`` processes per backend.

What is asserted comes from the jobs' own records (each job appends its worker's pid and its start time to
a file): both workers run jobs; after ``pause()`` no job starts later than PAUSE_EFFECT seconds after the
call (a worker looks every CONTROL_REFRESH second, plus slack for a loaded machine), although jobs are
still waiting and more are pushed; after ``resume()`` both workers start jobs again.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Final

import pytest

from kinetis_queue.contracts import ClearableQueue, Queue
from kinetis_queue.control import pause, resume
from kinetis_queue.control.hooks import CONTROL_REFRESH
from tests.faults import procs
from tests.jobs import RecordsStart
from tests.support.backends import Backend
from tests.support.helpers import wait_until

pytestmark = [pytest.mark.trait("stores_jobs"), pytest.mark.timeout(180)]

#: Jobs pushed before the workers start: more than two workers run before, during and after the pause.
JOBS: Final = 300
#: How long each job sleeps once it recorded its start (seconds).
JOB_SECONDS: Final = 0.05
#: A job may still start this long after pause() returned: a worker's next look, plus slack.
PAUSE_EFFECT: Final = CONTROL_REFRESH + 1.5
#: How long after that the records are watched for a job that should not have started.
OBSERVE: Final = 1.5


def _starts(path: Path) -> list[tuple[int, float, str]]:
    """(pid, start time, label) of every job that started, from the shared record file."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        pid, started, label = line.split(" ", 2)
        rows.append((int(pid), float(started), label))
    return rows


def test_pausing_stops_both_workers_and_resuming_restarts_them(
    connection: Queue, backend: Backend, queue_name: str, tmp_path: Path
) -> None:
    record = tmp_path / "starts.txt"
    connection.push_many([RecordsStart(str(record), f"job-{n}", JOB_SECONDS) for n in range(JOBS)], queue=queue_name)
    workers = [procs.spawn(backend, [queue_name], tmp_path, "--sleep=0.5") for _ in range(2)]
    pids = {worker.pid for worker in workers}
    try:
        wait_until(lambda: {pid for pid, _, _ in _starts(record)} == pids, timeout=90)

        paused_at = time.time()
        assert pause(queue_name, backend.connection) is True
        connection.push(RecordsStart(str(record), "pushed-while-paused"), queue=queue_name)  # pushes still succeed
        wait_until(lambda: time.time() > paused_at + PAUSE_EFFECT + OBSERVE, timeout=30)
        starts = _starts(record)
        late = [(pid, round(at - paused_at, 3), label) for pid, at, label in starts if at > paused_at + PAUSE_EFFECT]
        assert late == [], f"jobs started after the pause took effect: {late}"
        assert len(starts) < JOBS and connection.size(queue_name) > 0  # work was left, and not taken

        resumed_at = time.time()
        assert resume(queue_name, backend.connection) is True
        wait_until(lambda: {pid for pid, at, _ in _starts(record) if at > resumed_at} == pids, timeout=60)
    finally:
        exits = [procs.stop(worker) for worker in workers]
        resume(queue_name, backend.connection)
        if isinstance(connection, ClearableQueue):
            connection.clear(queue_name)
    assert exits == [0, 0]
