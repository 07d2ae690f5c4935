"""``python -m bench.peers`` (``make bench-peers``): kinetis-queue beside its peers, one worker process each.

Rows (bench/peers/rows.py): kinetis-queue, Dramatiq (1 thread + prefetch 64; 8 threads), Huey, Celery
and RQ on Redis; kinetis-queue, procrastinate and django-tasks-db on PostgreSQL; kinetis-queue and
Celery on RabbitMQ; each at its documented best single-process setting (see each module).

Three workloads, all timed by the jobs themselves (bench/peers/probe.py), so process start-up never counts:

- no-op drain: push N jobs (timed: push/s), start the worker, rate = N / (N-th completion - first start);
- push-to-start latency, with that same worker now idle: K probes pushed one at a time, a gap apart
  (at most --latency-budget seconds of them per row and repeat, so a worker that polls once a second
  gets fewer probes, not K seconds); latency = the job's start - the time before its push; p50/p95 over
  every repeat's probes. A polling worker is probed just after it went back to sleep, so it shows about
  its whole poll interval, not half of it: the figure is the worst case of polling, on purpose the
  case a wake-up fixes;
- I/O-bound drain: N jobs that each sleep 20 ms, the worker at 16 at once where it has threads
  (ideal: 800 jobs/s); rows without threads run one at a time and say so.

Each repeat runs the first two workloads for every row, then the third, the row order rotating between
repeats, so a load burst on this shared machine spreads over the rows. The kinetis rows also time
1,000 single pushes against one push_many of 1,000 per repeat. Medians of ``--repeat`` with min-max,
a markdown table per store, the issue's targets marked met/missed, and a JSON file with every
sample. Exit status 0 either way (a measurement), 1 only when a row failed to run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import log, positive_int
from bench.peers.base import REPO_ROOT, Peer, Settings
from bench.peers.rows import STORES, all_rows

PG_DB = "kinetis_bench_peers"
STORE_TITLES = {"redis": "Redis", "postgres": "PostgreSQL", "rabbitmq": "RabbitMQ"}
LIBRARIES = [
    "django",
    "dramatiq",
    "celery",
    "kombu",
    "rq",
    "huey",
    "procrastinate",
    "django-tasks-db",
    "redis",
    "psycopg",
    "amqp",
]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=positive_int, default=None, help="no-op jobs per drain (default 5000)")
    parser.add_argument("--io-n", type=positive_int, default=None, help="I/O-bound jobs per drain (default 800)")
    parser.add_argument("--io-ms", type=positive_int, default=20, help="sleep of an I/O-bound job, ms (default 20)")
    parser.add_argument("--io-concurrency", type=positive_int, default=16, help=argparse.SUPPRESS)
    parser.add_argument("--latency-k", type=int, default=None, help="latency probes per repeat (default 200)")
    parser.add_argument("--gap", type=float, default=0.02, help="seconds between latency probes (default 0.02)")
    parser.add_argument(
        "--latency-budget",
        type=float,
        default=20,
        help="seconds of latency probes per row and repeat at most, at least 3 probes (default 20; 0: no limit)",
    )
    parser.add_argument("--bulk-n", type=positive_int, default=1000, help="jobs in the push_many check (1000)")
    parser.add_argument("--repeat", type=positive_int, default=None, help="repeats; medians reported (default 3)")
    parser.add_argument("--quick", action="store_true", help="smoke run: N=50, I/O N=48, K=5, 1 repeat")
    parser.add_argument("--peers", default="", help="comma-separated row names (default: every row)")
    parser.add_argument("--stores", default=",".join(STORES), help="comma-separated stores (default: all)")
    parser.add_argument("--workloads", default="drain,io", help="drain (with latency), io (default both)")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/14")
    parser.add_argument("--pg-dsn", default=f"host=127.0.0.1 port=5432 user=postgres dbname={PG_DB}")
    parser.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672//")
    parser.add_argument("--json", type=Path, default=REPO_ROOT / "reports" / "bench-peers.json")
    parser.add_argument("--markdown", type=Path, default=None, help="also write the tables here")
    args = parser.parse_args(argv)
    quick = {"n": 50, "io_n": 48, "latency_k": 5, "repeat": 1}
    full = {"n": 5000, "io_n": 800, "latency_k": 200, "repeat": 3}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def select_rows(args: argparse.Namespace) -> list[Peer]:
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    names = [n.strip() for n in args.peers.split(",") if n.strip()]
    rows = [r for r in all_rows() if r.store in stores and (not names or r.name in names)]
    unknown = set(names) - {r.name for r in all_rows()}
    if unknown or not rows:
        raise SystemExit(
            f"bench.peers: unknown or no rows {sorted(unknown)}; rows: " + ", ".join(r.name for r in all_rows())
        )
    return rows


# -- processes --------------------------------------------------------------------------------------


class RowFailed(Exception):
    """A row's client or worker did not do what it should; the row's sample is missing, the run goes on."""


def row_env(settings: Settings, row: Peer) -> dict[str, str]:
    return {**os.environ, **settings.env(), **row.env(settings)}


def client(settings: Settings, row: Peer, action: str, *options: str, timeout: float = 900) -> dict[str, Any]:
    argv = [sys.executable, "-m", "bench.peers.client", row.name, action, *options]
    try:
        done = subprocess.run(
            argv,
            cwd=REPO_ROOT,
            env=row_env(settings, row),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise RowFailed(f"{row.name} {action}: no answer within {timeout} s") from exc
    if done.returncode != 0 or not done.stdout.strip():
        lines = done.stderr.strip().splitlines() or ["(no output)"]
        tail = "\n".join(lines)[-1500:]
        raise RowFailed(f"{row.name} {action} exited {done.returncode}: {lines[-1]}\n{tail}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


class Worker:
    """A row's worker process, in a session of its own so that stopping it reaches its children."""

    def __init__(self, settings: Settings, row: Peer, io: bool, log_path: Path) -> None:
        self.row = row
        self.log_path = log_path
        self.log = log_path.open("ab")
        env = {**row_env(settings, row), **row.worker_env(settings, io)}
        self.process = subprocess.Popen(
            row.worker_argv(settings, io),
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def alive(self) -> bool:
        return self.process.poll() is None

    def tail(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-1500:]

    def stop(self) -> None:
        """SIGTERM to the worker's process group; SIGKILL after 20 s."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)  # children left behind by the leader
        self.log.close()


def wait_done(recorder: Any, run: str, worker: Worker, timeout: float) -> dict[str, float]:
    """The run's record (written by its N-th job), waiting at most ``timeout`` s while the worker lives."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = recorder.blpop([f"{run}:done"], timeout=1)
        if got is not None:
            record: dict[str, float] = json.loads(got[1])
            return record
        if not worker.alive():
            raise RowFailed(f"{worker.row.name}: the worker exited ({worker.process.returncode}):\n{worker.tail()}")
    raise RowFailed(f"{worker.row.name}: {run} not done within {timeout:.0f} s:\n{worker.tail()}")


# -- workloads --------------------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace, settings: Settings, rows: list[Peer]) -> None:
        import redis

        self.args, self.settings, self.rows = args, settings, rows
        self.recorder = redis.Redis.from_url(settings.redis_url)
        self.samples: dict[str, dict[str, list[float]]] = {row.name: {} for row in rows}
        self.errors: list[str] = []
        self.started = time.time()
        self.logs = Path(settings.tmp, "logs")
        self.logs.mkdir()

    def add(self, row: Peer, metric: str, *values: float) -> None:
        self.samples[row.name].setdefault(metric, []).extend(values)

    def drain_and_latency(self, row: Peer, repeat: int) -> None:
        args, settings = self.args, self.settings
        run = f"{settings.tag}:{row.name}:{repeat}:drain"
        pushed = client(settings, row, "push", "--kind", "tick", "--n", str(args.n), "--run", run)
        worker = Worker(settings, row, False, self.logs / f"{row.name}.log")
        try:
            record = wait_done(self.recorder, run, worker, timeout=60 + args.n / 5)
            drain = args.n / (record["last"] - record["first"])
            push = args.n / pushed["seconds"]
            self.add(row, "drain", drain)
            self.add(row, "push", push)
            log(f"  {row.name:<16} drain {drain:8,.0f}/s  push {push:8,.0f}/s")
            if args.latency_k > 0:
                answer = client(
                    settings,
                    row,
                    "latency",
                    "--k",
                    str(args.latency_k),
                    "--gap",
                    str(args.gap),
                    "--budget",
                    str(args.latency_budget),
                    "--run",
                    f"{run}:lat",
                    timeout=120 + args.latency_k * 3,
                )
                latency: list[float] = answer["latencies"]
                self.add(row, "latency", *latency)
                log(f"  {row.name:<16} latency p50 {percentile(latency, 50) * 1000:.1f} ms ({len(latency)} probes)")
        finally:
            worker.stop()

    def io(self, row: Peer, repeat: int) -> None:
        args, settings = self.args, self.settings
        run = f"{settings.tag}:{row.name}:{repeat}:io"
        client(settings, row, "push", "--kind", "nap", "--n", str(args.io_n), "--ms", str(args.io_ms), "--run", run)
        worker = Worker(settings, row, True, self.logs / f"{row.name}-io.log")
        try:
            record = wait_done(self.recorder, run, worker, timeout=60 + args.io_n * args.io_ms / 1000 * 2)
        finally:
            worker.stop()
        rate = args.io_n / (record["last"] - record["first"])
        self.add(row, "io", rate)
        log(f"  {row.name:<16} I/O-bound {rate:8,.0f}/s")

    def bulk(self, row: Peer) -> None:
        result = client(self.settings, row, "bulk", "--n", str(self.args.bulk_n))
        for metric, value in result.items():
            self.add(row, metric, value)
        if "push_many" in result:
            log(f"  {row.name:<16} push_many {result['push_many']:,.0f}/s vs single {result['single_push']:,.0f}/s")

    def attempt(self, what: str, step: Any, *step_args: Any) -> None:
        try:
            step(*step_args)
        except RowFailed as exc:
            self.errors.append(f"{what}: {exc}")
            log(f"  FAILED {what}: {exc}")

    def run(self) -> None:
        workloads = {w.strip() for w in self.args.workloads.split(",")}
        for repeat in range(self.args.repeat):
            shift = repeat % len(self.rows)
            order = self.rows[shift:] + self.rows[:shift]
            log(f"bench.peers: repeat {repeat + 1}/{self.args.repeat}, order {', '.join(r.name for r in order)}")
            if "drain" in workloads:
                for row in order:
                    self.attempt(f"{row.name} drain", self.drain_and_latency, row, repeat)
            if "io" in workloads:
                for row in order:
                    self.attempt(f"{row.name} I/O-bound", self.io, row, repeat)
            for row in order:
                if row.ours:
                    self.attempt(f"{row.name} bulk", self.bulk, row)
            if repeat + 1 < self.args.repeat:
                write_report(self, self.started, done=repeat + 1)


# -- set-up and clean-up ------------------------------------------------------------------------------


def create_pg_database(settings: Settings) -> None:
    import psycopg

    pg = settings.pg()
    admin = " ".join(f"{k}={v}" for k, v in {**pg, "dbname": "postgres"}.items())
    with psycopg.connect(admin, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [pg["dbname"]]).fetchone() is None:
            conn.execute(f'CREATE DATABASE "{pg["dbname"]}"')


def clean_up(settings: Settings, rows: list[Peer]) -> None:
    """Delete the run's Redis keys and RabbitMQ queues (every name carries the run's tag)."""
    import redis

    client_ = redis.Redis.from_url(settings.redis_url)
    keys = list(client_.scan_iter(match=f"*{settings.tag}*", count=1000))
    if keys:
        client_.delete(*keys)
    # RQ's registry of queue names (its job records expire on their own, after its default result TTL).
    client_.srem("rq:queues", *[f"rq:queue:{row.queue(settings)}" for row in rows])
    if any(row.store == "rabbitmq" for row in rows):
        delete_rabbitmq_queues(settings, [row for row in rows if row.store == "rabbitmq"])


def delete_rabbitmq_queues(settings: Settings, rows: list[Peer]) -> None:
    """Each RabbitMQ row's queues; for kinetis-queue also its bulk check's queue and both delay ladders."""
    import amqp

    from kinetis_queue.backends.rabbitmq.ladder import delete_ladder

    address = settings.amqp_url.split("//", 1)[1].split("@")[-1].strip("/") or "127.0.0.1:5672"
    conn = amqp.Connection(address)
    conn.connect()
    try:
        for row in rows:
            names = [row.queue(settings)] + ([f"{row.queue(settings)}_bulk"] if row.ours else [])
            for name in names:
                channel = conn.channel()
                if row.ours:
                    delete_ladder(channel, name)
                else:  # Celery declares a direct exchange named as its default queue
                    channel.exchange_delete(name)
                channel.queue_delete(name)
                channel.close()
    finally:
        conn.close()


# -- report ---------------------------------------------------------------------------------------------


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


def spread(values: list[float] | None, fmt: str = "{:,.0f}") -> str:
    if not values:
        return "-"
    median = fmt.format(statistics.median(values))
    if len(values) == 1:
        return median
    return f"{median} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def medians(samples: dict[str, list[float]]) -> dict[str, float]:
    out = {m: statistics.median(v) for m, v in samples.items() if v and m != "latency"}
    if samples.get("latency"):
        out["latency_p50"] = percentile(samples["latency"], 50)
        out["latency_p95"] = percentile(samples["latency"], 95)
    return out


def tables(bench: Bench, args: argparse.Namespace) -> list[str]:
    ideal = args.io_concurrency / (args.io_ms / 1000)
    lines = []
    for store in STORES:
        rows = [r for r in bench.rows if r.store == store]
        if not rows:
            continue
        lines += [
            f"### {STORE_TITLES[store]}",
            "",
            "| row | setting | drain jobs/s | push jobs/s | I/O-bound jobs/s | % of ideal "
            f"{ideal:,.0f}/s | latency p50 / p95 |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for row in rows:
            s = bench.samples[row.name]
            m = medians(s)
            io_pct = f"{m['io'] / ideal:.0%}" if "io" in m else "-"
            if row.io_note and "io" in m:
                io_pct += f" ({row.io_note})"
            lat = (
                f"{m['latency_p50'] * 1000:.1f} / {m['latency_p95'] * 1000:.1f} ms ({len(s['latency'])} probes)"
                if "latency_p50" in m
                else "-"
            )
            push = spread(s.get("push"))
            if "push_many" in m:
                push += f"; push_many {m['push_many']:,.0f} vs single {m['single_push']:,.0f} (1,000 jobs)"
            label = row.label if not row.ours else f"**{row.label}**"
            setting = row.setting(False)
            if row.setting(True) != setting:
                setting += f"; I/O-bound: {row.setting(True)}"
            lines.append(
                f"| {label} | {setting} | {spread(s.get('drain'))} | {push} | "
                f"{spread(s.get('io'))} | {io_pct} | {lat} |"
            )
        lines.append("")
    return lines


def targets(bench: Bench, args: argparse.Namespace) -> list[dict[str, Any]]:
    """The issue's targets, each met / missed / not measured, from the medians of this run."""
    ideal = args.io_concurrency / (args.io_ms / 1000)
    m = {row.name: medians(bench.samples[row.name]) for row in bench.rows}
    by_name = {row.name: row for row in bench.rows}
    out: list[dict[str, Any]] = []

    def add(target: str, value: float | None, wanted: float | None, met: bool | None, detail: str) -> None:
        status = "not measured" if met is None else ("met" if met else "missed")
        out.append({"target": target, "status": status, "value": value, "wanted": wanted, "detail": detail})

    def ours(store: str, metric: str) -> float | None:
        return m.get(f"kinetis-{store}", {}).get(metric)

    redis_peers = {
        n: v["drain"] for n, v in m.items() if by_name[n].store == "redis" and not by_name[n].ours and "drain" in v
    }
    k = ours("redis", "drain")
    if k is not None and redis_peers:
        best = max(redis_peers, key=lambda n: redis_peers[n])
        ratio = k / redis_peers[best]
        add("Redis drain >= 1.5x the fastest peer", ratio, 1.5, ratio >= 1.5, f"{ratio:.2f}x {by_name[best].label}")
    else:
        add("Redis drain >= 1.5x the fastest peer", None, 1.5, None, "")
    k = ours("postgres", "drain")
    for peer in ("django-tasks-db", "procrastinate"):
        v = m.get(peer, {}).get("drain")
        ratio = k / v if k is not None and v else None
        add(
            f"PostgreSQL drain >= 10x {peer}",
            ratio,
            10,
            None if ratio is None else ratio >= 10,
            f"{ratio:.1f}x" if ratio else "",
        )
    k, v = ours("rabbitmq", "drain"), m.get("celery-rabbitmq", {}).get("drain")
    ratio = k / v if k is not None and v else None
    add(
        "RabbitMQ drain >= Celery acks_late",
        ratio,
        1,
        None if ratio is None else ratio >= 1,
        f"{ratio:.2f}x" if ratio else "",
    )
    for store in ("redis", "postgres"):
        v = ours(store, "io")
        pct = v / ideal if v is not None else None
        add(
            f"I/O-bound >= 85% of ideal on {STORE_TITLES[store]}",
            pct,
            0.85,
            None if pct is None else pct >= 0.85,
            f"{pct:.0%}" if pct is not None else "",
        )
    for store in STORES:
        v = ours(store, "latency_p50")
        add(
            f"latency p50 < 5 ms on {STORE_TITLES[store]}",
            v,
            0.005,
            None if v is None else v < 0.005,
            f"{v * 1000:.1f} ms" if v is not None else "",
        )
    for store in STORES:
        many, single = ours(store, "push_many"), ours(store, "single_push")
        ratio = many / single if many and single else None
        add(
            f"push_many 1,000 >= 5x single pushes on {STORE_TITLES[store]}",
            ratio,
            5,
            None if ratio is None else ratio >= 5,
            f"{ratio:.1f}x" if ratio else "",
        )
    return out


def versions() -> dict[str, str]:
    from importlib import metadata

    found = {}
    for name in LIBRARIES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


def write_report(bench: Bench, started: float, done: int) -> str:
    """Write the JSON (and --markdown) report of the repeats ``done`` so far; return the markdown text.

    Called after every repeat too, so a run stopped part-way still leaves its samples.
    """
    args, settings, rows = bench.args, bench.settings, bench.rows
    title = (
        f"One worker process per row, no-op jobs N={args.n}, I/O-bound N={args.io_n} x {args.io_ms} ms at "
        f"{args.io_concurrency} at once, latency up to K={args.latency_k} probes "
        f"{args.gap * 1000:.0f} ms apart; medians of {done} (min-max), same run."
    )
    lines = [title, "", *tables(bench, args), "Targets:", ""]
    checks = targets(bench, args)
    lines += [f"- {c['status'].upper()}: {c['target']}" + (f" ({c['detail']})" if c["detail"] else "") for c in checks]
    if bench.errors:
        lines += ["", "Rows that failed:"] + [f"- {e.splitlines()[0]}" for e in bench.errors]
    text = "\n".join(lines)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(text + "\n")
    report = {
        "tag": settings.tag,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": time.time() - started,
        "repeats_done": done,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "versions": versions(),
        "rows": {
            r.name: {
                "store": r.store,
                "label": r.label,
                "setting": r.setting(False),
                "io_setting": r.setting(True),
                "samples": bench.samples[r.name],
                "medians": medians(bench.samples[r.name]),
            }
            for r in rows
        },
        "targets": checks,
        "errors": bench.errors,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    return text


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rows = select_rows(args)
    tmp = tempfile.mkdtemp(prefix="bench-peers-")
    settings = Settings(args.redis_url, args.pg_dsn, args.amqp_url, f"kqb{os.getpid()}", tmp)
    log(
        f"bench.peers: N={args.n}, I/O N={args.io_n} x {args.io_ms} ms, K={args.latency_k}, repeat={args.repeat}, "
        f"rows {', '.join(r.name for r in rows)}; config and logs in {tmp}"
    )
    started = time.time()
    bench = Bench(args, settings, rows)
    bench.started = started
    try:
        if any(r.store == "postgres" for r in rows):
            create_pg_database(settings)
        for row in rows:
            row.prepare(settings)
        bench.run()
    finally:
        clean_up(settings, rows)
    text = write_report(bench, started, done=args.repeat)
    print(text)
    log(f"bench.peers: raw results in {args.json}")
    if not bench.errors:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if bench.errors else 0


if __name__ == "__main__":
    sys.exit(main())
