"""The RabbitMQ backend with real workers: heartbeats during a long job, a SIGKILLed worker, competing processes.

Contract: "Reservation and recovery" (RabbitMQ row: an unacked delivery is requeued by the broker as soon
as the connection drops, with its attempt count unchanged) and "Backend mechanisms: RabbitMQ".
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kinetis_queue import JobContext, connections
from kinetis_queue.backends.rabbitmq import RabbitMqQueue
from kinetis_queue.worker import Worker
from tests import jobs
from tests.jobs import HangsUntilRerun, Noop
from tests.settings import RABBITMQ_URL
from tests.support.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
#: The heartbeat interval of the long-job test, in seconds; the job runs for more than three of them.
SHORT_HEARTBEAT = 2


@pytest.fixture
def rabbit(queue_name: str) -> Iterator[RabbitMqQueue]:
    """The ``rabbitmq`` test connection; the test's queue (declared by any process) is deleted afterwards."""
    queue = connections.build("rabbitmq")
    assert isinstance(queue, RabbitMqQueue)
    yield queue
    for name in queue.declared | {queue_name}:
        queue.delete(name)
    queue.dispose()


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
        "--connection=rabbitmq",
        f"--queue={queue}",
        "-v",
        "0",
        *extra,
    ]


def test_a_job_three_heartbeats_long_keeps_its_connection_and_its_delivery(
    rabbit: RabbitMqQueue, queue_name: str, outcomes: list[tuple[str, dict[str, Any]]]
) -> None:
    """Contract: Backend mechanisms: RabbitMQ (a job running longer than the heartbeat interval keeps its
    connection and its delivery: heartbeats are serviced while handle() runs).

    Without them the broker would close the worker's connection after two missed heartbeats and requeue the
    job, and the second consumer below would receive it while the first still runs it.
    """
    worker_queue = RabbitMqQueue(url=RABBITMQ_URL, heartbeat=SHORT_HEARTBEAT)
    job_id = worker_queue.push(jobs.CallsBack(), queue=queue_name)
    seen: list[object] = []

    def meanwhile(context: JobContext) -> None:
        session = worker_queue._session
        assert session is not None and session.heartbeat == SHORT_HEARTBEAT  # negotiated with the broker
        # A bounded negative observation, the only way to see a non-event: another consumer looks for
        # the job for more than three heartbeat intervals while this one holds it unacked.
        seen.append(rabbit.pop(3.25 * SHORT_HEARTBEAT, [queue_name]))
        seen.append(worker_queue._session is session)

    jobs.CALLBACK[:] = [meanwhile]
    worker = Worker(worker_queue)
    try:
        assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()
        worker_queue.dispose()

    assert seen == [None, True]
    assert [name for name, _ in outcomes] == ["job_succeeded"]
    assert outcomes[0][1]["job"].id == job_id
    assert rabbit.size(queue_name) == 0
    assert rabbit.pop(0.5, [queue_name]) is None


def test_a_sigkilled_worker_loses_nothing_and_its_job_keeps_its_attempt_count(
    rabbit: RabbitMqQueue, queue_name: str, tmp_path: Path
) -> None:
    """Contract: Reservation and recovery (requeued by the broker as soon as the connection drops, attempts
    unchanged; the job then completes once)."""
    marker, done = tmp_path / "running", tmp_path / "done"
    rabbit.push(HangsUntilRerun(str(marker), str(done)), queue=queue_name, max_attempts=5)

    first = subprocess.Popen(_worker_command(queue_name, "--sleep=1"), env=_env(), cwd=ROOT)
    try:
        wait_until(marker.exists, timeout=60)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    assert first.returncode == -signal.SIGKILL
    assert marker.read_text() == "1"
    assert not done.exists()

    # No reservation to wait out: the broker requeued the delivery when the killed process's socket closed.
    wait_until(lambda: rabbit.size(queue_name) == 1, timeout=10)
    second = subprocess.run(
        _worker_command(queue_name, "--once", "--sleep=10"),
        env=_env(),
        cwd=ROOT,
        timeout=90,
        capture_output=True,
        text=True,
        check=False,
    )

    assert second.returncode == 0, second.stderr
    assert done.read_text() == "1\n"  # completed once, and the redelivery is still attempt 1
    assert rabbit.size(queue_name) == 0
    assert rabbit.pop(0.5, [queue_name]) is None


def test_competing_processes_never_reserve_a_job_twice(rabbit: RabbitMqQueue, queue_name: str) -> None:
    """Contract: At-least-once delivery (RabbitMQ reserves what a basic.get finds in one atomic step)."""
    pushed = {rabbit.push(Noop(), queue=queue_name) for _ in range(150)}
    poppers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.popper", "rabbitmq", queue_name],
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
    assert rabbit.size(queue_name) == 0
