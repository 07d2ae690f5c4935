"""SQS backend across real processes: a SIGKILLed queue_work loses nothing (contract: "Reservation and recovery")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from kinetis_queue.backends.sqs import SqsQueue
from tests.jobs import HangsOnFirstAttempt
from tests.support.helpers import wait_until
from tests.support.sqs_server import SqsTestQueues

ROOT = Path(__file__).resolve().parents[2]


def _worker(queue: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "django",
        "queue_work",
        "--settings=tests.settings",
        "--connection=sqs",
        f"--queue={queue}",
        "-v",
        "0",
        *extra,
    ]


def _env() -> dict[str, str]:
    # os.environ carries the moto_server fixture's endpoint and dummy credentials to the worker.
    return {**os.environ, "KINETIS_TESTS_SUBPROCESS": "1", "PYTHONPATH": str(ROOT)}


def test_a_sigkilled_worker_loses_nothing(sqs_queues: SqsTestQueues, queue_name: str, tmp_path: Path) -> None:
    """Contract, SQS: a worker that dies mid-job is redelivered by SQS once the visibility timeout expires,
    with ApproximateReceiveCount 2 as its attempt number, and the job completes once."""
    from kinetis_queue import connections

    queue = connections.build("sqs")
    assert isinstance(queue, SqsQueue)
    sqs_queues.prepare(queue)
    marker, done = tmp_path / "running", tmp_path / "done"
    try:
        queue.push(HangsOnFirstAttempt(str(marker), str(done)), queue=queue_name, max_attempts=5)

        first = subprocess.Popen(_worker(queue_name, "--sleep=1"), env=_env(), cwd=ROOT)
        try:
            wait_until(marker.exists, timeout=60)
        finally:
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=30)
        assert first.returncode == -signal.SIGKILL
        assert marker.read_text() == "1"
        assert not done.exists()

        # A second real worker takes the job over once the 1 s visibility timeout has passed.
        second = subprocess.run(
            _worker(queue_name, "--once", "--sleep=30"),
            env=_env(),
            cwd=ROOT,
            timeout=90,
            capture_output=True,
            text=True,
        )
        assert second.returncode == 0, second.stderr
        assert done.read_text() == "2"  # attempt 2: SQS's ApproximateReceiveCount

        # Completed once: deleted, so nothing is delivered again, even past another visibility timeout.
        assert queue.pop(1.5, [queue_name]) is None
        url = sqs_queues.urls[queue_name]
        counts = sqs_queues.admin.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        assert (counts["ApproximateNumberOfMessages"], counts["ApproximateNumberOfMessagesNotVisible"]) == ("0", "0")
    finally:
        queue.dispose()
