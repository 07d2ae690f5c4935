"""queue_work for production, in real processes: every exit reason, --timeout ending a stuck job, the
restart marker, per-job output lines and -v levels, and the --processes supervisor.

The jobs run on the SQLite connection (the worker's limits do not depend on the backend); the
restart and supervisor tests use PostgreSQL too, where workers on other hosts would meet.
"""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import override_settings

from kinetis_queue import queues
from kinetis_queue.models import FailedJob
from tests import jobs, operator_jobs
from tests.support.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
#: The SQL connections alone (the other backends' client libraries need not be installed).
SQL_ONLY = {
    "DEFAULT_CONNECTION": "sqlite",
    "CONNECTIONS": {
        "sqlite": {"BACKEND": "sql", "DATABASE": "default"},
        "postgres": {"BACKEND": "sql", "DATABASE": "postgres"},
    },
}
JOB_LINE = re.compile(
    r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] (?P<cls>[\w.]+) on (?P<queue>[\w-]+), attempt (?P<attempt>\d+): "
    r"(?P<outcome>succeeded|released|failed|lost) in \d+\.\d{3}s(?P<detail>.*)$"
)


def _env() -> dict[str, str]:
    env = {**os.environ, "KINETIS_TESTS_SUBPROCESS": "1", "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONUNBUFFERED", None)  # the lines must arrive as they happen without it, as in production
    return env


def _command(*args: str, settings: str = "tests.operator_settings") -> list[str]:
    return [sys.executable, "-m", "django", "queue_work", f"--settings={settings}", *args]


def work(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_command(*args), env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=timeout)


class Running:
    """A worker process whose output lines are collected as they come."""

    def __init__(self, *args: str) -> None:
        self.lines: list[str] = []
        self.process = subprocess.Popen(
            _command(*args), env=_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def saw(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def wait(self, timeout: float = 60) -> int:
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self._reader.join(timeout=10)
        assert self.process.stdout is not None
        self.process.stdout.close()


@pytest.fixture
def running() -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for worker in started:
        worker.kill()


def _stopped(result: subprocess.CompletedProcess[str]) -> str:
    match = re.search(r"Worker stopped \((\w+)\) after (\d+) job\(s\)\.", result.stdout)
    assert match, result.stdout + result.stderr
    return f"{match[1]}:{match[2]}"


# -- exit reasons ------------------------------------------------------------------------------------


def test_once_exits_completed_or_empty(queue_name: str) -> None:
    queues["sqlite"].push(jobs.Noop(), queue=queue_name)
    first = work("--connection=sqlite", f"--queue={queue_name}", "--once", "--sleep=5")
    assert first.returncode == 0 and _stopped(first) == "completed:1"
    second = work("--connection=sqlite", f"--queue={queue_name}", "--once", "--sleep=0.2")
    assert second.returncode == 0 and _stopped(second) == "empty:0"


def test_stop_when_empty_exits_empty(queue_name: str) -> None:
    for _ in range(3):
        queues["sqlite"].push(jobs.Noop(), queue=queue_name)
    result = work("--connection=sqlite", f"--queue={queue_name}", "--stop-when-empty", "--sleep=0.5")
    assert result.returncode == 0 and _stopped(result) == "empty:3"
    assert queues["sqlite"].size(queue_name) == 0


def test_max_jobs_counts_deliveries_and_leaves_the_rest(queue_name: str) -> None:
    queue = queues["sqlite"]
    # SQL pops in id order: the Fails job's two attempts come first (a retry and a failure), then a Noop.
    queue.push(jobs.Fails(), queue=queue_name, max_attempts=2)
    for _ in range(4):
        queue.push(jobs.Noop(), queue=queue_name)
    result = work("--connection=sqlite", f"--queue={queue_name}", "--max-jobs=3", "--backoff=0", "--sleep=5")
    assert result.returncode == 0 and _stopped(result) == "max_jobs:3"
    outcomes = [m["outcome"] for m in map(JOB_LINE.match, result.stdout.splitlines()) if m]
    assert outcomes == ["released", "failed", "succeeded"]
    assert queue.size(queue_name) == 3


def test_max_time_exits_an_idle_worker(queue_name: str) -> None:
    result = work("--connection=sqlite", f"--queue={queue_name}", "--max-time=1", "--sleep=30")
    assert result.returncode == 0 and _stopped(result) == "max_time:0"


def test_memory_exits_between_jobs(queue_name: str) -> None:
    queue = queues["sqlite"]
    queue.push(operator_jobs.Holds(8), queue=queue_name)
    queue.push(jobs.Noop(), queue=queue_name)
    result = work("--connection=sqlite", f"--queue={queue_name}", "--memory=1", "--sleep=5")
    assert result.returncode == 0 and _stopped(result) == "memory:1"
    assert queue.size(queue_name) == 1  # the job after the limit was left for another worker


def test_sigterm_exits_shutdown(queue_name: str, tmp_path: Path, running: list[Running]) -> None:
    marker = tmp_path / "ran"
    queues["sqlite"].push(operator_jobs.Touches(str(marker)), queue=queue_name)
    worker = Running("--connection=sqlite", f"--queue={queue_name}", "--sleep=1")
    running.append(worker)
    wait_until(marker.exists, timeout=60)
    worker.process.send_signal(signal.SIGTERM)
    assert worker.wait() == 0
    assert worker.saw("Worker stopped (shutdown) after 1 job(s).")


def test_an_infrastructure_failure_exits_error_and_non_zero(queue_name: str) -> None:
    """The 'brokenack' connection's ack() raises: the worker stops, non-zero, the delivery unsettled."""
    queues["sqlite"].push(jobs.Noop(), queue=queue_name)
    result = work("--connection=brokenack", f"--queue={queue_name}", "--sleep=5")
    assert result.returncode == 1
    assert "Worker stopped (error) after 0 job(s): ConnectionError: the job store went away" in result.stderr
    assert "Worker stopped (" not in result.stdout
    # Nothing was settled: the reservation expires and the job comes back as attempt 2.
    job = queues["sqlite"].pop(30, [queue_name])
    assert job is not None and job.attempts == 2
    queues["sqlite"].ack(job)


# -- --timeout ---------------------------------------------------------------------------------------


def test_timeout_ends_a_job_stuck_in_a_loop_as_its_own_failure(queue_name: str, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    job_id = queues["sqlite"].push(operator_jobs.Loops(str(marker), 600), queue=queue_name, max_attempts=1)
    result = work("--connection=sqlite", f"--queue={queue_name}", "--once", "--timeout=1", "--sleep=5", timeout=60)
    assert marker.read_text() == "1"
    assert result.returncode == 0 and _stopped(result) == "completed:1"
    record = FailedJob.objects.get(job_id=job_id)
    assert record.exception_class == "kinetis_queue.exceptions.JobTimeoutError"
    assert record.exception_message == "the attempt ran past the worker's --timeout of 1s"
    assert queues["sqlite"].size(queue_name) == 0


def test_a_timed_out_attempt_follows_the_retry_rules(queue_name: str, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    queue = queues["sqlite"]
    queue.push(operator_jobs.Loops(str(marker), 600), queue=queue_name, max_attempts=2)
    result = work(
        "--connection=sqlite",
        f"--queue={queue_name}",
        "--once",
        "--timeout=0.5",
        "--backoff=0",
        "--sleep=5",
        timeout=60,
    )
    assert result.returncode == 0
    [line] = [m for m in map(JOB_LINE.match, result.stdout.splitlines()) if m]
    assert (line["outcome"], line["detail"]) == ("released", " (JobTimeoutError, retry in 0s)")
    job = queue.pop(5, [queue_name])
    assert job is not None and job.attempts == 2
    queue.ack(job)


# -- restart -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("connection", ["sqlite", "postgres"])
def test_queue_restart_stops_a_worker_after_its_current_job(
    connection: str, queue_name: str, tmp_path: Path, running: list[Running]
) -> None:
    marker = tmp_path / "started"
    queue = queues[connection]
    # A job that runs longer than the marker's read interval, then one that must be left alone.
    queue.push(operator_jobs.Loops(str(marker), 1.5), queue=queue_name)
    queue.push(jobs.Noop(), queue=queue_name)
    worker = Running(f"--connection={connection}", f"--queue={queue_name}", "--sleep=1")
    running.append(worker)
    wait_until(marker.exists, timeout=60)
    call_command("queue_restart", f"--connection={connection}", stdout=io.StringIO())
    assert worker.wait() == 0
    assert worker.saw("Worker stopped (restart) after 1 job(s).")
    assert queue.size(queue_name) == 1


def test_an_idle_worker_sees_the_restart_at_its_next_poll(
    queue_name: str, tmp_path: Path, running: list[Running]
) -> None:
    marker = tmp_path / "ran"
    queues["sqlite"].push(operator_jobs.Touches(str(marker)), queue=queue_name)
    worker = Running("--connection=sqlite", f"--queue={queue_name}", "--sleep=0.5")
    running.append(worker)
    wait_until(marker.exists, timeout=60)  # the worker is running (its generation is read)
    with override_settings(KINETIS_QUEUE=SQL_ONLY):
        call_command("queue_restart", stdout=io.StringIO())  # every connection
    assert worker.wait() == 0
    assert worker.saw("Worker stopped (restart) after 1 job(s).")


# -- output ------------------------------------------------------------------------------------------


def test_one_readable_line_per_job_and_nothing_at_verbosity_0(queue_name: str) -> None:
    queue = queues["sqlite"]
    queue.push(jobs.Noop(), queue=queue_name)
    queue.push(jobs.Fails("label", token="s3cr3t"), queue=queue_name, max_attempts=2)
    result = work("--connection=sqlite", f"--queue={queue_name}", "--stop-when-empty", "--backoff=0", "--sleep=0.5")
    lines = [m for m in map(JOB_LINE.match, result.stdout.splitlines()) if m]
    assert [(m["cls"], m["queue"], m["attempt"], m["outcome"], m["detail"]) for m in lines] == [
        ("tests.jobs.Noop", queue_name, "1", "succeeded", ""),
        ("tests.jobs.Fails", queue_name, "1", "released", " (RuntimeError, retry in 0s)"),
        ("tests.jobs.Fails", queue_name, "2", "failed", " (RuntimeError)"),
    ]
    assert "s3cr3t" not in result.stdout + result.stderr

    queue.push(jobs.Noop(), queue=queue_name)
    quiet = work("-v", "0", "--connection=sqlite", f"--queue={queue_name}", "--stop-when-empty", "--sleep=0.5")
    assert quiet.returncode == 0 and quiet.stdout == "" and quiet.stderr == ""


def test_verbosity_levels_choose_the_log_lines(queue_name: str) -> None:
    queue = queues["sqlite"]
    queue.push(jobs.Noop(), queue=queue_name)
    queue.push(jobs.Fails(), queue=queue_name, max_attempts=2)
    normal = work("--connection=sqlite", f"--queue={queue_name}", "--once", "--sleep=5")
    assert "succeeded (attempt 1)" not in normal.stderr  # -v 1: warnings and errors only
    verbose = work("-v", "2", "--connection=sqlite", f"--queue={queue_name}", "--once", "--backoff=0", "--sleep=5")
    assert 'WARNING kinetis_queue.worker Job "tests.jobs.Fails" failed (attempt 1), retrying in 0s' in verbose.stderr
    queue.push(jobs.Noop(), queue=queue_name)
    verbose = work("-v", "2", "--connection=sqlite", f"--queue={queue_name}", "--stop-when-empty", "--sleep=0.5")
    assert 'INFO kinetis_queue.worker Job "tests.jobs.Noop" succeeded (attempt 1)' in verbose.stderr


# -- arguments ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--max-jobs=0"],
        ["--max-jobs=1.5"],
        ["--max-time=0"],
        ["--memory=-1"],
        ["--timeout=0"],
        ["--timeout=inf"],
        ["--processes=0"],
        ["--processes=two"],
    ],
)
def test_limits_are_validated_before_anything_is_printed(args: list[str]) -> None:
    result = work("--connection=sqlite", *args)
    assert result.returncode == 2
    assert result.stdout == ""


# -- --processes -------------------------------------------------------------------------------------


def test_processes_runs_n_workers_restarts_a_dead_one_and_forwards_sigterm(
    queue_name: str, tmp_path: Path, running: list[Running]
) -> None:
    out = tmp_path / "runs"
    supervisor = Running("--processes=2", "--connection=postgres", f"--queue={queue_name}", "--sleep=0.5")
    running.append(supervisor)
    pids = wait_until(
        lambda: (
            [int(p) for p in re.findall(r"started \(pid (\d+)\)", "\n".join(supervisor.lines))]
            if supervisor.saw("worker 2 started")
            else None
        ),
        timeout=60,
    )
    assert len(pids) == 2
    wait_until(lambda: sum("watching" in line for line in supervisor.lines) == 2, timeout=60)  # both running
    queue = queues["postgres"]
    for _ in range(6):
        queue.push(operator_jobs.Touches(str(out)), queue=queue_name)
    wait_until(lambda: out.exists() and len(out.read_text().splitlines()) == 6, timeout=60)
    # Every job settled, not only run: a success's ack is sent in a batch a moment later, and a child killed
    # before it sent its batch gives its job back to run again (once seen under load: one job left at the end).
    wait_until(lambda: queue.stats(queue_name).reserved == 0 and queue.size(queue_name) == 0, timeout=60)

    os.kill(pids[0], signal.SIGKILL)  # a child dies unexpectedly: the supervisor starts another
    wait_until(lambda: sum("watching" in line for line in supervisor.lines) == 3, timeout=60)
    assert supervisor.saw(f"worker 1 (pid {pids[0]}) died with status -9; restarting it in 1s.")
    assert sum("started (pid" in line for line in supervisor.lines) == 3
    queue.push(operator_jobs.Touches(str(out)), queue=queue_name)
    wait_until(lambda: len(out.read_text().splitlines()) == 7, timeout=60)

    supervisor.process.send_signal(signal.SIGTERM)
    assert supervisor.wait() == 0
    stopped = [line for line in supervisor.lines if "Worker stopped (shutdown)" in line]
    # Each child got the one signal and stopped between jobs; a restarted child the signal reached while it was
    # still starting (after its "watching" line, before its handlers) ends by that signal, which the supervisor
    # counts as a clean stop: it had taken no job.
    ended_by_signal = [line for line in supervisor.lines if line.endswith(f"stopped with status -{signal.SIGTERM}.")]
    assert len(stopped) + len(ended_by_signal) == 2 and len(stopped) >= 1
    assert queue.size(queue_name) == 0


def test_processes_exits_when_its_children_have_stopped(queue_name: str) -> None:
    result = work("--processes=2", "--connection=sqlite", f"--queue={queue_name}", "--stop-when-empty", "--sleep=0.2")
    assert result.returncode == 0
    assert result.stdout.count("Worker stopped (empty) after 0 job(s).") == 2
    assert result.stdout.count("stopped with status 0.") == 2


# -- --timeout in process: what the interrupt can and cannot stop --------------------------------


def _one(job: object, queue_name: str, timeout: float, outcomes: list) -> None:
    from kinetis_queue.worker import Worker

    queues["sqlite"].push(job, queue=queue_name, max_attempts=1)  # type: ignore[arg-type]
    worker = Worker(queues["sqlite"], job_timeout=timeout)
    try:
        assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_the_interrupt_is_not_swallowed_by_except_exception(queue_name: str, outcomes: list) -> None:
    _one(operator_jobs.CatchesException(600), queue_name, 0.3, outcomes)
    [(name, kwargs)] = outcomes
    assert name == "job_failed_permanently"
    assert type(kwargs["exception"]).__name__ == "JobTimeoutError"


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_job_that_swallows_the_interrupt_still_fails_as_timed_out(queue_name: str, outcomes: list) -> None:
    _one(operator_jobs.SwallowsEverything(1.0), queue_name, 0.3, outcomes)
    [(name, kwargs)] = outcomes
    assert name == "job_failed_permanently"
    assert type(kwargs["exception"]).__name__ == "JobTimeoutError"


def test_a_job_within_its_timeout_succeeds_and_leaves_no_alarm(queue_name: str, outcomes: list) -> None:
    previous = signal.getsignal(signal.SIGALRM)
    _one(jobs.Noop(), queue_name, 5, outcomes)
    assert [name for name, _ in outcomes] == ["job_succeeded"]
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) == previous


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_outside_the_main_thread_the_timeout_is_checked_after_handle(queue_name: str, outcomes: list) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            _one(operator_jobs.SwallowsEverything(0.5), queue_name, 0.1, outcomes)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert errors == []
    [(name, kwargs)] = outcomes
    assert name == "job_failed_permanently"
    assert type(kwargs["exception"]).__name__ == "JobTimeoutError"
