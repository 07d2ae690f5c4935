"""``python -m bench.redis``: the Redis backend against a bare redis-py loop, push/s and drain jobs/s.

Each repeat pushes N no-op jobs on both sides, then drains them with one worker process per side:

- push: ``queues["redis"].push(Noop(), queue=q)`` N times in this process, against N bare
  ``LPUSH`` calls of an envelope of the same shape (a fresh 32-hex id and time per job) through a
  plain ``redis.Redis`` client;
- drain: a worker process does what bench/drain.py does (a real ``Worker`` built for the
  connection, timed over the ``process_next()`` calls that run the jobs: pop, heartbeat,
  ``handle()``, ack, signals), against a process running the bare at-least-once loop: per job
  one ``EVALSHA`` of a minimal reserve script (pending tail -> leased at Redis TIME + visibility
  timeout) and one ``ZREM``.

In both phases the two sides alternate in blocks of BLOCK jobs (the drain processes wait for
their turn on a pipe), and which side goes first alternates between repeats: this machine is
shared, and a load burst then hits both sides alike instead of whichever phase it fell in.

Speed claims are ratios against the bare loop measured in the same run. Each phase is checked (N
envelopes pending on each side after the push, nothing pending or leased after the drain), and the
run aborts otherwise. Medians of ``--repeat`` runs are printed with PASS/FAIL against the issue's
targets (drain >= 60 %, push >= 70 % of bare); the exit code is 0 either way: this is a measurement.

Django is configured here (``settings.configure``), in this process and in the drain processes,
with one redis connection under a key prefix of its own (``kinetis_bench_<pid>:``), deleted at the
start and the end of the run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.common import log as _log
from bench.common import positive_int as _positive_int

REPO_ROOT = Path(__file__).resolve().parent.parent
QUEUE = "bench"
CONNECTION = "redis"
#: The two sides alternate every BLOCK jobs, in the push phase and in the drain phase.
BLOCK = 250
#: The issue's targets: project rate / bare rate, measured in the same run.
TARGETS = {"push": 0.70, "drain": 0.60}
#: The bare loop's lease, as long as the project's default visibility timeout.
VISIBILITY_TIMEOUT = 300
#: The bare reserve: the same steps as the project's sweep.lua, without promotion or reclaim.
BARE_RESERVE = """
local time = redis.call('TIME')
local envelope = redis.call('LINDEX', KEYS[1], -1)
if not envelope then return false end
redis.call('ZADD', KEYS[2], tonumber(time[1]) + tonumber(time[2]) / 1000000 + tonumber(ARGV[1]), envelope)
redis.call('RPOP', KEYS[1])
return envelope
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Options shared with ``python -m bench`` (``make bench`` passes the same BENCH_ARGS to both)."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.redis",
        description="RedisQueue vs a bare redis-py loop: push/s and drain jobs/s. "
        "Options of python -m bench that this one does not know (--backends, --json) are ignored.",
    )
    parser.add_argument("--n", type=_positive_int, default=5000, help="jobs per push and per drain (default 5000)")
    parser.add_argument("--repeat", type=_positive_int, default=3, help="runs; the median is reported (default 3)")
    parser.add_argument("--url", default="redis://127.0.0.1:6379/0", help="the Redis server (default: %(default)s)")
    parser.add_argument("--prefix", default=f"kinetis_bench_{os.getpid()}:", help=argparse.SUPPRESS)
    parser.add_argument("--drain", choices=["project", "bare"], default=None, help=argparse.SUPPRESS)
    args, ignored = parser.parse_known_args(argv)
    if ignored and args.drain is None:
        _log(f"bench.redis: ignoring {' '.join(ignored)}")
    return args


def configure(url: str, prefix: str) -> None:
    """Django settings for the bench: the bench app (its Noop job) and one redis connection."""
    from django.conf import settings

    settings.configure(
        SECRET_KEY="kinetis-queue-bench",
        USE_TZ=True,
        INSTALLED_APPS=["django.contrib.contenttypes", "kinetis_queue", "bench"],
        DATABASES={},
        KINETIS_QUEUE={
            "DEFAULT_CONNECTION": CONNECTION,
            "CONNECTIONS": {CONNECTION: {"BACKEND": "redis", "URL": url, "PREFIX": prefix}},
        },
        LOGGING={"version": 1, "disable_existing_loggers": False, "loggers": {"kinetis_queue": {"level": "WARNING"}}},
    )
    import django

    django.setup()


def bare_keys(prefix: str) -> tuple[str, str]:
    return f"{prefix}bare:pending", f"{prefix}bare:leased"


def bare_envelope() -> str:
    """An envelope shaped like the project's Noop one, with a fresh id and time."""
    return (
        f'{{"id":"{uuid.uuid4().hex}","pushedAt":{time.time()!r},"class":"bench.jobs.Noop","args":{{}},'
        '"attempts":0,"maxAttempts":null,"metadata":{}}'
    )


# -- the drain processes ----------------------------------------------------------------------------


def serve(drain: Callable[[int], None]) -> None:
    """A drain process's loop: read a count, drain that many jobs, answer the seconds it took."""
    print("ready", flush=True)
    for line in sys.stdin:
        count = int(line)
        started = time.perf_counter()
        drain(count)
        print(time.perf_counter() - started, flush=True)


def serve_project() -> None:
    """Process jobs with a Worker, as bench/drain.py and queue_work build it."""
    from kinetis_queue import conf, connections
    from kinetis_queue.contracts import DisposableQueue
    from kinetis_queue.worker import Worker

    settings = conf.connection_settings(CONNECTION)
    built = connections.build(CONNECTION)
    worker = Worker(
        built,
        connection=CONNECTION,
        default_max_attempts=settings.max_attempts,
        retry_base_delay=settings.retry_base_delay,
    )

    def drain(count: int) -> None:
        for _ in range(count):
            if not worker.process_next(0.5, [QUEUE]):
                raise SystemExit(f"bench.redis: the project drain ran dry after {worker.processed} jobs")

    try:
        serve(drain)
    finally:
        worker.close()
        if isinstance(built, DisposableQueue):
            built.dispose()


def serve_bare(url: str, prefix: str) -> None:
    """The bare loop: one EVALSHA reserve and one ZREM per job, on a plain redis.Redis client."""
    import redis

    client = redis.Redis.from_url(url)
    pending, leased = bare_keys(prefix)
    sha = client.script_load(BARE_RESERVE)

    def drain(count: int) -> None:
        for _ in range(count):
            envelope = client.evalsha(sha, 2, pending, leased, VISIBILITY_TIMEOUT)
            if envelope is None:
                raise SystemExit("bench.redis: the bare drain ran dry")
            client.zrem(leased, envelope)

    try:
        serve(drain)
    finally:
        client.close()


class Drainer:
    """A drain process (``--drain side``), told on its stdin how many jobs to drain next."""

    def __init__(self, args: argparse.Namespace, side: str) -> None:
        path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONPATH": path}
        env.pop("DJANGO_SETTINGS_MODULE", None)
        self.side = side
        self.seconds = 0.0
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.redis", "--drain", side, "--url", args.url, "--prefix", args.prefix],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._answer()  # "ready": Django and the client are set up, nothing is connected or timed yet

    def _answer(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"bench.redis: the {self.side} drain exited with status {self.process.wait()}")
        return line

    def drain(self, count: int) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{count}\n")
        self.process.stdin.flush()
        self.seconds += float(self._answer())

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        if self.process.wait(timeout=60) != 0:
            raise SystemExit(f"bench.redis: the {self.side} drain exited with status {self.process.returncode}")


# -- the measurements -------------------------------------------------------------------------------


class Store:
    """The bench's keys on the server, read with a plain client to check each phase."""

    def __init__(self, url: str) -> None:
        import redis

        from kinetis_queue import queues

        self.client = redis.Redis.from_url(url)
        self.project = queues[CONNECTION].keys(QUEUE)  # type: ignore[attr-defined]
        self.bare = bare_keys(queues[CONNECTION].prefix)  # type: ignore[attr-defined]

    def reset(self) -> None:
        self.client.delete(*self.project, *self.bare)

    def expect(self, phase: str, pending: int) -> None:
        counts = {
            "project pending": self.client.llen(self.project.pending),
            "project leased": self.client.zcard(self.project.leased),
            "bare pending": self.client.llen(self.bare[0]),
            "bare leased": self.client.zcard(self.bare[1]),
        }
        wanted = {"project pending": pending, "project leased": 0, "bare pending": pending, "bare leased": 0}
        if counts != wanted:
            raise SystemExit(f"bench.redis: after the {phase}, the keys hold {counts}, expected {wanted}")


def alternate(n: int, project_first: bool, project: Callable[[int], None], bare: Callable[[int], None]) -> None:
    """Run N jobs on each side, alternating in blocks of BLOCK."""
    sides = [project, bare] if project_first else [bare, project]
    for offset in range(0, n, BLOCK):
        for side in sides:
            side(min(BLOCK, n - offset))


def push_phase(store: Store, n: int, project_first: bool) -> dict[str, float]:
    """Push N jobs on each side; return both push/s."""
    from bench.jobs import Noop
    from kinetis_queue import queues

    queue = queues[CONNECTION]
    queue.size(QUEUE)  # opens the project's connection before the clock starts
    client, pending = store.client, store.bare[0]
    client.llen(pending)  # and the bare client's
    times = {"project": 0.0, "bare": 0.0}

    def project(count: int) -> None:
        started = time.perf_counter()
        for _ in range(count):
            queue.push(Noop(), queue=QUEUE)
        times["project"] += time.perf_counter() - started

    def bare(count: int) -> None:
        started = time.perf_counter()
        for _ in range(count):
            client.lpush(pending, bare_envelope())
        times["bare"] += time.perf_counter() - started

    alternate(n, project_first, project, bare)
    store.expect("push", n)
    return {"project_push": n / times["project"], "bare_push": n / times["bare"]}


def drain_phase(args: argparse.Namespace, store: Store, project_first: bool) -> dict[str, float]:
    """Drain the N jobs of each side with its own process; return both jobs/s."""
    project, bare = Drainer(args, "project"), Drainer(args, "bare")
    alternate(args.n, project_first, project.drain, bare.drain)
    project.close()
    bare.close()
    store.expect("drain", 0)
    return {"project_drain": args.n / project.seconds, "bare_drain": args.n / bare.seconds}


def measure(args: argparse.Namespace, store: Store) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {}
    for run in range(args.repeat):
        store.reset()
        project_first = run % 2 == 0
        result = push_phase(store, args.n, project_first)
        result.update(drain_phase(args, store, project_first))
        for metric, value in result.items():
            samples.setdefault(metric, []).append(value)
        _log(f"  redis run {run + 1}/{args.repeat}: " + "  ".join(f"{k} {v:,.0f}" for k, v in result.items()))
    return samples


def report(medians: dict[str, float], args: argparse.Namespace) -> list[str]:
    """The table: project and bare rates, their ratio, and PASS/FAIL against the target."""
    lines = [
        f"kinetis_queue redis vs bare redis-py: N={args.n} no-op jobs, median of {args.repeat}, one worker process",
        "",
        f"{'':<14}{'project':>10}{'bare':>10}{'ratio':>8}{'target':>9}",
    ]
    for kind, label in (("push", "push/s"), ("drain", "drain jobs/s")):
        ratio, target = medians[f"{kind}_ratio"], TARGETS[kind]
        lines.append(
            f"{label:<14}{medians[f'project_{kind}']:>10,.0f}{medians[f'bare_{kind}']:>10,.0f}{ratio:>8.0%}"
            f"{'>= ' + format(target, '.0%'):>9}  {'PASS' if ratio >= target else 'FAIL'}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure(args.url, args.prefix)
    if args.drain == "project":
        serve_project()
        return 0
    if args.drain == "bare":
        serve_bare(args.url, args.prefix)
        return 0

    store = Store(args.url)
    _log(f"bench.redis: N={args.n}, repeat={args.repeat}, {args.url}, key prefix {args.prefix!r}")
    try:
        samples = measure(args, store)
    finally:
        store.reset()
    medians: dict[str, Any] = {metric: statistics.median(values) for metric, values in samples.items()}
    medians["push_ratio"] = medians["project_push"] / medians["bare_push"]
    medians["drain_ratio"] = medians["project_drain"] / medians["bare_drain"]
    print()
    for line in report(medians, args):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
