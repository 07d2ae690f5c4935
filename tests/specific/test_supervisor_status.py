"""queue_work --processes when a child ends badly while the supervisor stops: the command exits non-zero.

Of two children, the one that got the job and the forwarded SIGTERM finishes its job, then dies (a crash
point, status 137) instead of stopping cleanly: the supervisor, stopping, does not restart it and exits 1
with an error saying so.
At -v 0 the supervisor's own lines are not printed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from kinetis_queue import queues
from tests import operator_jobs
from tests.support.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]


def test_a_child_dying_while_the_supervisor_stops_makes_it_exit_non_zero(tmp_path: Path, queue_name: str) -> None:
    marker = tmp_path / "started"
    queues["sqlite"].push(operator_jobs.Loops(str(marker), 1.0), queue=queue_name, max_attempts=1)
    env = {**os.environ, "KINETIS_TESTS_SUBPROCESS": "1", "PYTHONPATH": str(ROOT), "KQ_CRASHPOINT": "after_handle"}
    command = [sys.executable, "-m", "django", "queue_work", "--settings=tests.operator_settings"]
    args = ["--processes=2", "--connection=sqlite", f"--queue={queue_name}", "--sleep=0.2", "-v", "0"]
    process = subprocess.Popen(
        [*command, *args], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_until(marker.exists)  # the child is inside the job
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=30)
        queues.clearable("sqlite").clear(queue_name)
    assert process.returncode == 1
    assert "a worker process ended with a non-zero status" in err
    assert "Supervisor:" not in out
