"""Worker processes for the fault tier: real ``queue_work`` subprocesses, signalled only by PID.

``spawn()`` starts ``python -m tests.faults.worker`` (queue_work plus the history's observers) with
the test's history directory and knobs in its environment; its output goes to a log file beside
the history. ``Pool`` keeps N of them alive and is what a nemesis kills. ``drain()`` runs a fresh
in-process worker until the store is empty and pop() has come back empty three times in a row.
"""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kinetis_queue.contracts import Queue
from kinetis_queue.worker import Worker
from tests.faults import history
from tests.support.backends import Backend
from tests.support.coverage_env import uncovered

ROOT = Path(__file__).resolve().parents[2]
#: Debian's libfaketime (package ``faketime``, installed by scripts/system-deps.sh).
FAKETIME_LIBS = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
#: Put first on the PYTHONPATH of a process under libfaketime: its sitecustomize.py mends time.sleep().
FAKETIME_SITE = Path(__file__).resolve().parent / "faketime_site"


#: The fault scenarios whose processes coverage still measures: the only tests to reach some paths of queue_work
#: and queue_relay (a second signal, a store down at start-up, the relay's restarts). The others' processes run
#: code the in-process tiers measure already, most of them until a SIGKILL that loses their data anyway, and
#: measuring them cost, say, the crash points 43 % more CPU (162 s of user time against 113 s).
MEASURED_SCENARIOS = frozenset(
    {
        "test_worker_faults.py",
        "test_outbox.py",
        "test_network_faults.py",
        "test_service_faults.py",
        "test_redis_failover.py",
    }
)


def measured() -> bool:
    """Whether coverage measures the processes the running test starts: yes, unless it is a fault scenario
    outside MEASURED_SCENARIOS (KQ_FAULT_COVERAGE=1: every one)."""
    running = os.environ.get("PYTEST_CURRENT_TEST", "").split("::", 1)[0]
    path = Path(running)
    if os.environ.get("KQ_FAULT_COVERAGE") == "1" or "faults" not in path.parts:
        return True
    return path.name in MEASURED_SCENARIOS


def env(
    history_dir: Path,
    *,
    crashpoint: str | None = None,
    faketime: str | None = None,
    visibility_timeout: int | None = None,
    no_renewal: bool = False,
    role: str = "worker",
    pythonpath: Sequence[str] = (),
    port: int | None = None,
    heartbeat: int | None = None,
    prefetch_hold: float | None = None,
    registry_interval: float | None = None,
) -> dict[str, str]:
    """The environment of a worker subprocess of the current test."""
    result = {
        **os.environ,
        "KINETIS_TESTS_SUBPROCESS": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), *pythonpath]),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        history.ENV: str(history_dir),
        "KQ_HISTORY_ROLE": role,
        "PGAPPNAME": "kq-fault-worker",  # so that a service fault can pick this run's worker sessions
    }
    for key in (
        "KQ_CRASHPOINT",
        "KQ_VISIBILITY_TIMEOUT",
        "KQ_NO_RENEWAL",
        "LD_PRELOAD",
        "FAKETIME",
        "FAKETIME_DONT_FAKE_MONOTONIC",
        "KQ_FAKETIME_SKEW",
        "KQ_MONO_MINUS_WALL",
        "KQ_PORT",
        "KQ_HEARTBEAT",
        "KQ_PREFETCH_HOLD",
        "KQ_REGISTRY_INTERVAL",
    ):
        result.pop(key, None)
    if not measured():
        result = uncovered(result)
    if crashpoint:
        result["KQ_CRASHPOINT"] = crashpoint
    if visibility_timeout is not None:
        result["KQ_VISIBILITY_TIMEOUT"] = str(visibility_timeout)
    if no_renewal:
        result["KQ_NO_RENEWAL"] = "1"
    if port is not None:
        result["KQ_PORT"] = str(port)
    if heartbeat is not None:
        result["KQ_HEARTBEAT"] = str(heartbeat)
    if prefetch_hold is not None:
        result["KQ_PREFETCH_HOLD"] = str(prefetch_hold)
    if registry_interval is not None:
        result["KQ_REGISTRY_INTERVAL"] = str(registry_interval)
    if faketime:
        if not FAKETIME_LIBS:
            raise RuntimeError("libfaketime is missing: run scripts/system-deps.sh (apt-get install faketime)")
        # Only the wall clock is skewed, as on a host whose clock is off: with the monotonic clock
        # faked too, every timed thread wait (the heartbeat's renewal timer) would wait the skew on
        # top. faketime_site/sitecustomize.py mends the one call that mode breaks, time.sleep(). The
        # history puts its events on the monotonic clock from the last two numbers.
        result.update(
            LD_PRELOAD=FAKETIME_LIBS[0],
            FAKETIME=faketime,
            FAKETIME_DONT_FAKE_MONOTONIC="1",
            PYTHONPATH=os.pathsep.join([str(FAKETIME_SITE), result["PYTHONPATH"]]),
            KQ_FAKETIME_SKEW=str(float(faketime.removesuffix("s"))),
            KQ_MONO_MINUS_WALL=repr(time.monotonic() - time.time()),
        )
    return result


def spawn(
    backend: Backend, queues: Sequence[str], history_dir: Path, *args: str, **knobs: Any
) -> subprocess.Popen[bytes]:
    """Start one worker on ``backend``'s connection watching ``queues``."""
    command = [
        sys.executable,
        "-m",
        "tests.faults.worker",
        f"--connection={backend.connection}",
        f"--queue={','.join(queues)}",
        "--backoff=0",
        "-v",
        "0",
        *args,
    ]
    log = open(history_dir / f"worker-{time.monotonic_ns()}.log", "wb")
    try:
        return subprocess.Popen(command, env=env(history_dir, **knobs), cwd=ROOT, stdout=log, stderr=log)
    finally:
        log.close()


def stop(process: subprocess.Popen[bytes], timeout: float = 30) -> int:
    """SIGTERM, then SIGKILL after ``timeout``; return the exit status."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait(timeout=30)


def stop_all(processes: Sequence[subprocess.Popen[bytes]], timeout: float = 30) -> list[int]:
    """stop() several processes at once: one SIGTERM each first, so their stops overlap (each waits out its
    poll); then SIGKILL any still running ``timeout`` seconds later. The exit statuses, in order."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    statuses = []
    for process in processes:
        try:
            statuses.append(process.wait(timeout=max(0.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            process.kill()
            statuses.append(process.wait(timeout=30))
    return statuses


class Pool:
    """N workers kept alive: a killed one is replaced by ``respawn()``."""

    def __init__(
        self, backend: Backend, queues: Sequence[str], history_dir: Path, size: int, *args: str, **knobs: Any
    ) -> None:
        self.backend, self.queues, self.history_dir = backend, list(queues), history_dir
        self.size, self.args, self.knobs = size, args, knobs
        self.processes: list[subprocess.Popen[bytes]] = []
        self.exits: list[int] = []
        self.kills = 0

    def __enter__(self) -> Pool:
        self.respawn()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def respawn(self) -> None:
        """Reap exited workers and start new ones up to the pool's size."""
        alive = []
        for process in self.processes:
            code = process.poll()
            if code is None:
                alive.append(process)
            else:
                self.exits.append(code)
        self.processes = alive
        while len(self.processes) < self.size:
            self.processes.append(spawn(self.backend, self.queues, self.history_dir, *self.args, **self.knobs))

    def kill(self, index: int, signum: int = signal.SIGKILL) -> int:
        """Signal one worker by PID (a fault the nemesis records); return the PID."""
        process = self.processes[index % len(self.processes)]
        history.record(f"fault.{signal.Signals(signum).name.lower()}", None, target=process.pid)
        process.send_signal(signum)
        if signum == signal.SIGKILL:
            process.wait(timeout=30)
            self.kills += 1
        return process.pid

    def working(self, share: int) -> list[int]:
        """The indexes of the workers that have finished ``share`` jobs since they were spawned: a nemesis kills
        only those.

        A worker killed before it has done anything proves nothing and makes no progress. Killing on a fixed
        pace regardless starved a storm on a loaded machine, where starting a worker (Django, the store's
        client) takes longer than the pace: sqs-c8 made 287 kills for 800 jobs and once did not finish at all,
        and the Redis Cluster failover storm ran into its 120 s deadline (132 s, against 10-15 s on a quiet
        machine). With a share per life, a storm costs about ``jobs / share`` kills whatever the machine's
        speed, and each kill still lands on a worker in the middle of its work.
        """

        def done(pid: int) -> int:
            return sum(path.read_bytes().count(b'"exec.done"') for path in self.history_dir.glob(f"*-{pid}-*.jsonl"))

        return [index for index, process in enumerate(self.processes) if done(process.pid) >= share]

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
        for process in self.processes:
            self.exits.append(stop(process))
        self.processes = []

    def unexpected_exits(self) -> list[int]:
        """Exit statuses other than 0 (a controlled exit), -9 (our SIGKILL) and -15 (our SIGTERM reaching a
        worker still starting up, before run() installed its handler)."""
        return [code for code in self.exits if code not in (0, -signal.SIGKILL, -signal.SIGTERM)]


def drain(queue: Queue, queues: Sequence[str], store: Any = None, *, timeout: float = 90, empties: int = 3) -> float:
    """Run a fresh worker in this process until the store is empty and pop() came back empty ``empties`` times.

    While the store still holds something (a reservation waiting out its visibility timeout, a
    delay), pop() looks for up to the visibility timeout + 1 s; after that, briefly. Without a store
    adapter, the first empty pop looks for a whole window and the next ones briefly. Returns seconds.
    """
    started = time.monotonic()
    window = float(getattr(queue, "visibility_timeout", lambda: 1)()) + 1
    worker = Worker(queue, retry_base_delay=0)
    seen_empty = processed = 0
    held: int | None = None
    waited_out = False  # without a store adapter: one empty pop that looked for a whole window
    try:
        while seen_empty < empties:
            if time.monotonic() - started > timeout:
                raise AssertionError(
                    f"the queue did not drain within {timeout}s: {processed} job(s) processed, "
                    f"the store still held {held} (None: no store adapter)"
                )
            held = store.remaining(queues[0]) if store is not None and len(queues) == 1 else None
            long_look = bool(held) if store is not None else not waited_out
            if worker.process_next(window if long_look else 0.2, queues):
                seen_empty, waited_out = 0, False
                processed += 1
            elif not held:
                seen_empty += 1
                waited_out = waited_out or long_look
    finally:
        worker.close()
    return time.monotonic() - started
