"""``python -m bench.scale`` (``make bench-scale``): jobs/s against worker processes, per store.

For each store (Redis, PostgreSQL, RabbitMQ, SQS on moto), each worker count (1, 2, 4, 8, 16) and
each ``--concurrency``, on a fresh queue:

1. the queue is paused (kinetis_queue.control) and N no-op jobs are pushed with ``push_many``;
2. that many ``queue_work`` processes start (``-v 0 --no-schedule --no-relay``); once each is in its
   loop (its row in the worker registry) the queue is resumed, so start-up is not timed;
3. the waiting count (``size()``) is read every SAMPLE seconds; the rate is measured between the
   first reading at or below 90 % of N and the first at or below 10 %: the steady state, without the
   ramp of the first deliveries or the tail of the last. At those two readings the benchmark also
   reads the CPU of the worker processes and of the store's server processes (/proc), the machine's
   busy share, the loopback bytes and the store's own counters (bench/scale_meter.py), so each figure
   is per job of the same window; RabbitMQ's connection counters (read with ``rabbitmqctl``, too heavy
   for the window) are read before the resume and after the drain, per job of the whole drain;
4. the workers get SIGTERM (a graceful stop); jobs they held ahead and gave back are drained by one
   more worker with ``--stop-when-empty``, untimed, and the queue must end empty.

The machine is small and shared (2 cores here): the servers and every worker compete for the same
cores, so the curves show where the machine saturates, and the per-job CPU and round trips are what
docs/capacity.md extrapolates from. ``--n``, ``--processes`` and ``--stores`` make a short run possible.
The exit code is 0 unless a run failed (a queue not drained, a worker that would not start).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench import scale_meter as meter
from bench.common import log, positive_int

REPO_ROOT = Path(__file__).resolve().parent.parent
SETTINGS = "bench.scale_settings"
STORES = ["redis", "postgres", "rabbitmq", "sqs"]
PROCESSES = [1, 2, 4, 8, 16]
#: Seconds between two readings of the waiting count.
SAMPLE = 0.1
#: Jobs per push_many() call while filling a queue.
PUSH_CHUNK = 1000
#: Most jobs per SQS run by default (--sqs-n): moto is an emulator whose cost per job grows with the depth.
SQS_N = 2000
#: A window shorter than this is reported, but flagged: a few readings make a rough rate.
SHORT_WINDOW = 1.0
#: Seconds the workers may take to start, and a drain to finish.
START_TIMEOUT = 180.0
DRAIN_TIMEOUT = 1800.0


def _int_list(value: str) -> list[int]:
    try:
        items = [positive_int(part.strip()) for part in value.split(",") if part.strip()]
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{value!r}: each must be a positive integer") from exc
    if not items:
        raise argparse.ArgumentTypeError("give at least one number")
    return items


def _stores(value: str) -> list[str]:
    names = [part.strip() for part in value.split(",") if part.strip()]
    unknown = [name for name in names if name not in STORES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown store(s) {unknown}; choose from {', '.join(STORES)}")
    return names


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description="jobs/s against worker processes.")
    parser.add_argument("--n", type=positive_int, default=100_000, help="no-op jobs per run (default 100000)")
    parser.add_argument(
        "--processes", type=_int_list, default=PROCESSES, help="worker process counts (default 1,2,4,8,16)"
    )
    parser.add_argument(
        "--concurrency", type=_int_list, default=[1], help="--concurrency values of each worker (default 1)"
    )
    parser.add_argument("--stores", type=_stores, default=STORES, help=f"default {','.join(STORES)}")
    parser.add_argument(
        "--sqs-n",
        type=positive_int,
        default=SQS_N,
        help=f"at most this many jobs per SQS run (default {SQS_N}): moto's receive reads the whole queue, so its "
        "cost per job grows with the queue's depth",
    )
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write every run as JSON")
    return parser.parse_args(argv)


# -- the stores ----------------------------------------------------------------------------------------


class Moto:
    """moto's SQS server for the sqs store, on a free loopback port, with dummy credentials; the workers
    reach it through a relay that counts their API calls and bytes (``relay.endpoint``)."""

    def __init__(self) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = int(sock.getsockname()[1])
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("bench.scale: moto's server did not start") from None
                time.sleep(0.1)  # a port being opened by another process: nothing to wait on
        self.relay = meter.CountingRelay(self.port)

    def stop(self) -> None:
        self.relay.close()
        self.process.terminate()
        self.process.wait(10)


def aws_environment() -> dict[str, str]:
    """Dummy credentials, so neither this process nor a worker reaches a real AWS account."""
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }


def prepare_queue(store: str, name: str) -> None:
    """What a store needs before its first push: SQS's queue exists (the backend never creates one)."""
    if store == "sqs":
        import boto3
        from django.conf import settings

        entry = settings.KINETIS_QUEUE["CONNECTIONS"]["sqs"]
        client = boto3.session.Session().client("sqs", endpoint_url=entry["ENDPOINT_URL"], region_name="us-east-1")
        client.create_queue(QueueName=name)


def remove_queue(store: str, queue: Any, name: str) -> None:
    """Leave nothing behind: RabbitMQ's queue and ladder, SQS's queue; SQL and Redis hold nothing once drained."""
    if store == "rabbitmq":
        queue.delete(name)
    elif store == "sqs":
        queue.client.delete_queue(QueueUrl=queue.client.get_queue_url(QueueName=name)["QueueUrl"])


def server_probe(store: str, moto: Moto | None) -> tuple[list[int], dict[str, float]]:
    """The store's server processes and its counters, now."""
    from django.conf import settings

    if store == "redis":
        return meter.redis_info(settings.REDIS_URL)
    if store == "postgres":
        return meter.postgres_info("postgres")
    if store == "rabbitmq":
        return meter.pids_named("beam.smp"), {}
    if moto is None:
        return [], {}
    return [moto.process.pid], moto.relay.counters()


# -- one run -------------------------------------------------------------------------------------------


def _environment(moto: Moto | None) -> dict[str, str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": SETTINGS, **aws_environment()}
    if moto is not None:
        env["KINETIS_SCALE_SQS_ENDPOINT"] = moto.relay.endpoint
    return env


def _worker_command(store: str, name: str, concurrency: int, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "django", "queue_work", "--connection", store, "--queue", name, "-v", "0",
        "--no-schedule", "--no-relay", "--sleep", "0.5", "--concurrency", str(concurrency), *extra,
    ]  # fmt: skip


def _registered(pids: list[int]) -> int:
    from kinetis_queue.observability.models import WorkerRecord

    return WorkerRecord.objects.using("default").filter(pid__in=pids).count()


def _fill(queue: Any, name: str, n: int) -> float:
    from bench.jobs import Noop

    started = time.perf_counter()
    for start in range(0, n, PUSH_CHUNK):
        queue.push_many([Noop() for _ in range(min(PUSH_CHUNK, n - start))], queue=name)
    return n / (time.perf_counter() - started)


def _snapshot(store: str, moto: Moto | None, at: float, remaining: int, workers: list[int]) -> meter.Snapshot:
    servers, counters = server_probe(store, moto)
    return meter.Snapshot(
        at=at,
        remaining=remaining,
        workers=meter.cpu_of(workers),
        servers=meter.cpu_of(servers),
        busy=meter.machine_ticks(),
        loopback=meter.loopback_bytes(),
        counters=counters,
    )


def run_one(store: str, processes: int, concurrency: int, n: int, moto: Moto | None) -> dict[str, Any]:
    """Fill a fresh queue with ``n`` jobs, drain it with ``processes`` workers; the window's figures."""
    from kinetis_queue import connections, control

    name = f"scale-{store}-{processes}x{concurrency}-{uuid.uuid4().hex[:8]}"
    prepare_queue(store, name)
    queue = connections.build(store)
    try:
        return _measure(store, processes, concurrency, n, moto, queue, name)
    finally:
        if store in ("redis", "postgres") and queue.size(name):  # a failed run: leave no job behind (the
            queue.clear(name)  # RabbitMQ and SQS queues are deleted with theirs)
        control.resume(name, connection=store)
        remove_queue(store, queue, name)
        if hasattr(queue, "dispose"):
            queue.dispose()


def _measure(
    store: str, processes: int, concurrency: int, n: int, moto: Moto | None, queue: Any, name: str
) -> dict[str, Any]:
    from kinetis_queue import control

    control.pause(name, connection=store)
    push_rate = _fill(queue, name, n)
    env = _environment(moto)
    workers = [
        subprocess.Popen(_worker_command(store, name, concurrency), cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL)
        for _ in range(processes)
    ]
    pids = [worker.pid for worker in workers]
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while _registered(pids) < processes:
            if time.monotonic() > deadline or any(worker.poll() is not None for worker in workers):
                raise RuntimeError(f"{store}: {processes} workers did not all start")
            time.sleep(0.2)  # the registry row is written by another process: poll it
        start = _snapshot(store, moto, time.perf_counter(), n, pids)
        whole = start.counters  # counters over the whole drain too (PostgreSQL's lag while busy)
        amqp_before = meter.rabbitmq_connections(pids) if store == "rabbitmq" else {}
        control.resume(name, connection=store)
        first = last = None
        deadline = time.monotonic() + DRAIN_TIMEOUT
        while True:
            remaining = queue.size(name)
            now = time.perf_counter()
            if first is None and remaining <= 0.9 * n:
                first = _snapshot(store, moto, now, remaining, pids)
            if first is not None and remaining <= 0.1 * n:
                last = _snapshot(store, moto, now, remaining, pids)
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{store}: {remaining} of {n} jobs still waiting after {DRAIN_TIMEOUT:g}s")
            time.sleep(SAMPLE)
        while queue.size(name) > 0 and time.monotonic() < deadline:
            time.sleep(SAMPLE)
        amqp_after = meter.rabbitmq_connections(pids) if store == "rabbitmq" else {}
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        for worker in workers:
            try:
                worker.wait(60)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
    if store == "postgres":  # a backend flushes its statistics when it ends: read them after the workers'
        time.sleep(1.0)  # backends have ended (asynchronously, after each worker closed its connection)
        commits = server_probe(store, moto)[1]["pg_commits"] - whole["pg_commits"]
    # Deliveries reserved ahead and given back at the stop: one more worker finishes them, untimed.
    subprocess.run(
        _worker_command(store, name, 1, "--stop-when-empty"), cwd=REPO_ROOT, env=env, check=True, timeout=600
    )
    left = queue.size(name)
    if left:
        raise RuntimeError(f"{store}: {left} jobs left after the drain")
    assert first is not None and last is not None
    if last.remaining >= first.remaining:  # N so small that one reading saw both ends: from the resume on
        first = start  # (which adds the resume's delay of up to a second)
    result = meter.delta(first, last)
    if store == "postgres":
        result["pg_commits_per_job"] = commits / n
    for counter, value in amqp_after.items():  # the whole drain, as PostgreSQL's commits
        result[f"{counter}_per_job"] = (value - amqp_before[counter]) / n
    result.update(store=store, processes=processes, concurrency=concurrency, n=n, push_rate=push_rate)
    return result


# -- set-up and report -----------------------------------------------------------------------------------


def setup(stores: list[str]) -> Moto | None:
    """Create the PostgreSQL database, configure Django, migrate; start moto for SQS."""
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
    os.environ.setdefault("KINETIS_BENCH_DB", "kinetis_scale")  # before bench.settings is first imported
    for name, value in aws_environment().items():
        os.environ[name] = value
    from bench.settings import create_databases

    create_databases(["postgres"])  # the registry and pauses live in SQLite; the SQL store's jobs here
    moto = Moto() if "sqs" in stores else None
    if moto is not None:
        os.environ["KINETIS_SCALE_SQS_ENDPOINT"] = moto.endpoint
    import django
    from django.core.management import call_command

    django.setup()
    for alias in ("default", "postgres"):
        call_command("migrate", database=alias, verbosity=0)
    return moto


def _vacuum() -> None:
    """PostgreSQL: the previous run's dead rows vacuumed away and fresh statistics, untimed."""
    from django.db import connections

    with connections["postgres"].cursor() as cursor:
        cursor.execute("VACUUM ANALYZE kinetis_queue_jobs")


def store_ops(r: dict[str, Any]) -> tuple[float | None, float | None]:
    """A run's operations and bytes per job at the store, as each store counts them (None: not counted).

    Redis: commands (each ``redis.call`` in a script counts) and its bytes in and out; PostgreSQL: commits;
    RabbitMQ: the broker's socket reads and writes on the workers' connections, and their bytes; SQS: API
    calls from the workers, and their bytes (requests and replies).
    """
    for ops, bytes_in, bytes_out in (
        ("redis_commands", "redis_bytes_in", "redis_bytes_out"),
        ("pg_commits", None, None),
        ("amqp_ops", "amqp_bytes_in", "amqp_bytes_out"),
        ("sqs_calls", "sqs_bytes_in", "sqs_bytes_out"),
    ):
        if f"{ops}_per_job" in r:
            total = r[f"{ops}_per_job"]
            if bytes_in is None:
                return total, None
            return total, r[f"{bytes_in}_per_job"] + r[f"{bytes_out}_per_job"]
    return None, None


def report(results: list[dict[str, Any]]) -> str:
    """The Markdown table: one row per run."""
    lines = [
        "| store | processes x concurrency | jobs/s | worker CPU ms/job | server CPU ms/job | worker cores | "
        "server cores | machine busy | store ops/job | store bytes/job | loopback bytes/job | push jobs/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        trips, store_bytes = store_ops(r)
        short = "*" if r["seconds"] < SHORT_WINDOW else ""
        lines.append(
            f"| {r['store']} | {r['processes']} x {r['concurrency']} | {r['rate']:,.0f}{short} | "
            f"{r['worker_cpu_ms_per_job']:.3f} | {r['server_cpu_ms_per_job']:.3f} | {r['worker_cores']:.2f} | "
            f"{r['server_cores']:.2f} | {100 * r['machine_busy']:.0f} % | "
            f"{'-' if trips is None else f'{trips:.2f}'} | {'-' if store_bytes is None else f'{store_bytes:.0f}'} | "
            f"{r['loopback_bytes_per_job']:.0f} | {r['push_rate']:,.0f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    moto = setup(args.stores)
    results: list[dict[str, Any]] = []
    errors: list[str] = []
    try:
        for store in args.stores:
            for concurrency in args.concurrency:
                for processes in args.processes:
                    if store == "postgres":
                        _vacuum()
                    n = min(args.n, args.sqs_n) if store == "sqs" else args.n
                    log(f"bench.scale: {store}, {processes} x {concurrency}, {n} jobs")
                    try:
                        result = run_one(store, processes, concurrency, n, moto)
                    except (RuntimeError, subprocess.SubprocessError) as exc:
                        errors.append(str(exc))
                        log(f"bench.scale: FAILED: {exc}")
                        continue
                    log(f"bench.scale:   {result['rate']:,.0f} jobs/s, machine {100 * result['machine_busy']:.0f} %")
                    results.append(result)
    finally:
        if moto is not None:
            moto.stop()
    print(f"## Scale: N={args.n} no-op jobs per run (SQS at most {args.sqs_n}), {os.cpu_count()} CPUs, ")
    print(f"{platform.platform()}\n")
    print(report(results))
    print(
        f"\nRates between 90 % and 10 % of N left; * marks a window under {SHORT_WINDOW:g} s (a rough rate: "
        "raise --n). Store ops: Redis commands, PostgreSQL commits and RabbitMQ socket reads + writes (both over the "
        "whole drain), SQS API calls. Loopback bytes count the machine's other loopback traffic too."
    )
    if errors:
        print("\nFailed runs:\n" + "\n".join(f"- {error}" for error in errors))
    if args.json is not None:
        args.json.write_text(json.dumps({"n": args.n, "results": results, "errors": errors}, indent=2))
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
