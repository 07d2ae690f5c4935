"""``queue_work --reload`` for real (issue 19 part 3): a worker subprocess on the SQLite connection runs a
temporary job module; the module's file changes; the next job runs the new code; SIGTERM stops it all
with status 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from kinetis_queue import queues
from kinetis_queue.contracts import PreparedPush
from kinetis_queue.payload.envelope import new_envelope
from tests.support.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]

JOBS = """
import os
from pathlib import Path

from kinetis_queue import Job


class Mark(Job):
    def __init__(self, path: str) -> None:
        self.path = path

    def handle(self) -> None:
        # Written whole, then renamed: the test reads the file as soon as it exists.
        Path(self.path + ".part").write_text("{version}")
        os.replace(self.path + ".part", self.path)
"""

SETTINGS = """
from tests.settings import *  # noqa: F403

KINETIS_QUEUE = {**KINETIS_QUEUE, "IMPORTS": [*KINETIS_QUEUE["IMPORTS"], "devjobs"]}  # noqa: F405
"""


class Output:
    """The lines a process writes to a pipe, read in a thread as they come."""

    def __init__(self, stream: object) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append(line.rstrip("\n"))

    def has(self, words: str) -> int:
        return sum(words in line for line in self.lines)


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def push_mark(queue_name: str, path: Path) -> None:
    """A devjobs.Mark job, sent as stored (this process does not import the temporary module)."""
    queues["sqlite"].send(PreparedPush(new_envelope("devjobs.Mark", {"path": str(path)}, None, {}), 0, queue_name))


def test_a_changed_job_module_runs_its_new_code_and_sigterm_stops_cleanly(tmp_path: Path, queue_name: str) -> None:
    jobs = tmp_path / "devjobs.py"
    jobs.write_text(JOBS.format(version="v1"))
    (tmp_path / "devsettings.py").write_text(SETTINGS)
    env = {
        **os.environ,
        "KINETIS_TESTS_SUBPROCESS": "1",
        "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}",
        "PYTHONDONTWRITEBYTECODE": "1",  # a .pyc of the same second and size would hide the change
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("RUN_MAIN", None)
    command = [
        sys.executable,
        "-m",
        "django",
        "queue_work",
        "--settings=devsettings",
        "--connection=sqlite",
        f"--queue={queue_name}",
        "--sleep=0.2",
        "--no-schedule",
        "--reload",
    ]
    parent = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    out = Output(parent.stdout)
    try:
        wait_until(lambda: out.has("Watching for file changes"), timeout=60)
        first = tmp_path / "first"
        push_mark(queue_name, first)
        wait_until(first.exists, timeout=60)
        assert first.read_text() == "v1"

        jobs.write_text(JOBS.format(version="v2"))
        wait_until(lambda: out.has("Watching for file changes") == 2, timeout=60)  # the fresh worker's
        assert out.has("devjobs.py changed") == 1 and out.has("Worker stopped to reload after 1 job(s).") == 1
        assert out.has("Code changed: starting the worker again.") == 1
        second = tmp_path / "second"
        push_mark(queue_name, second)
        wait_until(second.exists, timeout=60)
        assert second.read_text() == "v2"

        [child] = children(parent.pid)
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(timeout=60) == 0
        wait_until(lambda: not Path(f"/proc/{child}").exists(), timeout=30)
        assert out.has("Worker stopped (shutdown) after 1 job(s).") == 1  # the child's own clean stop
    finally:
        if parent.poll() is None:
            for pid in children(parent.pid):
                os.kill(pid, signal.SIGKILL)
            parent.kill()
            parent.wait(timeout=30)
        assert parent.stdout is not None
        parent.stdout.close()


def test_reload_runs_one_process() -> None:
    with pytest.raises(CommandError, match="--reload runs one worker process"):
        call_command("queue_work", "--reload", "--processes=2", "--connection=sqlite")


# -- queue_dev: runserver and one reloading worker ----------------------------------------------------

DEV_SETTINGS = (
    SETTINGS
    + """
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1"]
"""
)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(port: int) -> bool:
    import urllib.error
    import urllib.request

    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/no-such-page/", timeout=2)
    except urllib.error.HTTPError:
        return True  # a 404 from Django: the server is up
    except OSError:
        return False
    return True


def test_queue_dev_runs_the_server_and_one_worker_and_stops_both(tmp_path: Path, queue_name: str) -> None:
    (tmp_path / "devjobs.py").write_text(JOBS.format(version="v1"))
    (tmp_path / "devsettings.py").write_text(DEV_SETTINGS)
    env = {
        **os.environ,
        "KINETIS_TESTS_SUBPROCESS": "1",
        "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("RUN_MAIN", None)
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "django",
        "queue_dev",
        f"127.0.0.1:{port}",
        "--settings=devsettings",
        "--connection=sqlite",
        f"--queue={queue_name}",
    ]
    dev = subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE, text=True)
    out = Output(dev.stdout)
    try:
        wait_until(lambda: answers(port), timeout=60)
        wait_until(lambda: out.has("Watching for file changes with"), timeout=60)
        done = tmp_path / "done"
        push_mark(queue_name, done)
        wait_until(done.exists, timeout=60)
        # runserver's reloader started its child again with the same command line: still one worker.
        assert out.has(f"watching {queue_name}") == 1
        workers = children(dev.pid)
        assert len(workers) == 2  # runserver's child and the worker (its reloading parent)
        dev.send_signal(signal.SIGTERM)
        assert dev.wait(timeout=60) == 0
        wait_until(lambda: out.has("Worker stopped (shutdown) after 1 job(s)."), timeout=30)
        for pid in workers:
            wait_until(lambda pid=pid: not Path(f"/proc/{pid}").exists() or "Z" in _state(pid), timeout=30)
        assert not answers(port)
    finally:
        if dev.poll() is None:
            for pid in children(dev.pid):
                os.kill(pid, signal.SIGKILL)
            dev.kill()
            dev.wait(timeout=30)
        assert dev.stdout is not None
        dev.stdout.close()


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return "Z"


def test_queue_dev_refuses_a_sync_connection() -> None:
    with pytest.raises(CommandError, match=r"sync connection.*needs no worker"):
        call_command("queue_dev", "--connection=sync")
