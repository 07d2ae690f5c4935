"""``python -m bench`` (``make bench``): project vs bare driver, push/s and drain jobs/s, per SQL database.

For each backend (sql-postgres, sql-mariadb, sql-sqlite) and each repeat, both sides push N no-op
jobs and then drain them with one worker process:

- push: ``queues[conn].push(Noop(), queue=q)`` N times in this process, on Django's own connection
  for the alias (Django's default settings: CONN_MAX_AGE 0, autocommit), against N single-row
  autocommitted INSERTs on a plain driver connection (bench/bare.py). The two sides alternate in
  blocks of PUSH_BLOCK jobs, so a load burst on this shared machine hits both alike;
- drain: ``python -m bench.drain`` in a fresh process, a real ``Worker`` timed over the
  ``process_next()`` calls that run the N jobs (Django start-up excluded, see bench/drain.py),
  against ``python -m bench.bare``, the bare claim/delete loop, in a fresh process too. Which side
  drains first alternates between repeats.

Speed claims are ratios against the bare loop measured in the same run: absolute rates depend on
this machine, the ratios much less. On PostgreSQL both tables are vacuumed and analyzed before
every timed phase, so neither side inherits the other's dead rows or a stale plan; one more project
drain runs WITHOUT a fresh ANALYZE (``stale_drain``: statistics from a nearly empty table, as a
queue table usually has), since the claim's speed must not depend on them. Each phase is
checked: after a push the table holds N rows of the queue, after a drain none, and no job was
recorded as failed; otherwise the run aborts. The drain also reports how many connections the
worker opened (one expected, whatever CONN_MAX_AGE says), and on PostgreSQL a supplementary,
like-for-like reference: the bare loop with ``synchronous_commit = off``, the commit mode of the
project's worker connection (the issue's reference commits synchronously).

The medians of ``--repeat`` runs are reported, with PASS/FAIL against the PostgreSQL targets
(drain >= 60 % and push >= 70 % of bare); the exit code is 0 either way: this is a measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import log as _log
from bench.common import positive_int as _positive_int

REPO_ROOT = Path(__file__).resolve().parent.parent
QUEUE = "bench"
#: Push blocks: the two sides alternate every PUSH_BLOCK jobs.
PUSH_BLOCK = 250
#: PostgreSQL targets from the issue: project rate / bare rate, measured in the same run.
TARGETS = {"push": 0.70, "drain": 0.60}
TARGET_BACKEND = "sql-postgres"
ALL_BACKENDS = ["sql-postgres", "sql-mariadb", "sql-sqlite"]


def _backends(value: str) -> list[str]:
    from bench.settings import BACKENDS

    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in BACKENDS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown backend(s) {unknown}; choose from {', '.join(BACKENDS)}")
    return names


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="kinetis_queue vs bare driver loops: push/s and drain jobs/s."
    )
    parser.add_argument("--n", type=_positive_int, default=5000, help="jobs per push and per drain (default 5000)")
    parser.add_argument(
        "--backends",
        type=_backends,
        default=ALL_BACKENDS,
        help=f"comma-separated list (default: {','.join(ALL_BACKENDS)})",
    )
    parser.add_argument(
        "--repeat", type=_positive_int, default=3, help="runs per backend; the median is reported (default 3)"
    )
    parser.add_argument(
        "--json", type=Path, default=None, metavar="PATH", help="also write the medians and every sample as JSON"
    )
    return parser.parse_args(argv)


# -- set-up -----------------------------------------------------------------------------------------


def setup(backends: list[str]) -> None:
    """Create the databases, configure Django, migrate each alias, create the bare tables."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    from bench import bare
    from bench.settings import BACKENDS, create_databases

    aliases = [BACKENDS[name][1] for name in backends]
    create_databases(aliases)
    import django
    from django.core.management import call_command

    django.setup()
    for alias in aliases:
        call_command("migrate", database=alias, verbosity=0)
    for name in backends:
        bare.ensure_table(name)


def _alias(backend: str) -> str:
    from bench.settings import BACKENDS

    return BACKENDS[backend][1]


def _connection(backend: str) -> str:
    from bench.settings import BACKENDS

    return BACKENDS[backend][0]


def _project_sql(backend: str, sql: str, params: list[Any] | None = None) -> Any:
    from django.db import connections

    with connections[_alias(backend)].cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone() if cursor.description else None


def _project_count(backend: str) -> int:
    return int(_project_sql(backend, "SELECT COUNT(*) FROM kinetis_queue_jobs WHERE queue = %s", [QUEUE])[0])


def _failed_count(backend: str) -> int:
    row = _project_sql(backend, "SELECT COUNT(*) FROM kinetis_queue_failed_jobs WHERE queue = %s", [QUEUE])
    return int(row[0])


def _vacuum(backend: str) -> None:
    """On PostgreSQL, reclaim dead rows and refresh statistics of both tables before a timed phase."""
    from bench import bare

    if bare.vendor(backend) != "postgresql":
        return
    for table in ("kinetis_queue_jobs", bare.TABLE):
        _project_sql(backend, f"VACUUM ANALYZE {table}")


def _reset(backend: str) -> None:
    from bench import bare

    _project_sql(backend, "DELETE FROM kinetis_queue_jobs")
    _project_sql(backend, "DELETE FROM kinetis_queue_failed_jobs WHERE queue = %s", [QUEUE])
    bare.clear(backend)


def _close_django_connections() -> None:
    from django.db import connections

    connections.close_all()


def _run_child(module: str, args: list[str]) -> dict[str, Any]:
    """Run ``python -m module args`` from the repo root; return the JSON object it prints last."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.settings"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"bench: {module} {' '.join(args)} exited with status {done.returncode}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# -- the measurements --------------------------------------------------------------------------------


def push_phase(backend: str, n: int, project_first: bool) -> dict[str, float]:
    """Push N jobs on each side, interleaved in blocks of PUSH_BLOCK; return both push/s.

    Interleaving spreads the load of this shared machine over both sides alike. Each side pushes on
    one connection opened before the clock starts (Django's own connection for the alias, opened
    by a first query; the bare loop's driver connection).
    """
    from bench import bare
    from bench.jobs import Noop
    from kinetis_queue import queues

    queue = queues[_connection(backend)]
    _vacuum(backend)
    _project_count(backend)  # opens Django's connection for the alias
    conn = bare.connect(backend, autocommit=True)
    times = {"project": 0.0, "bare": 0.0}

    def project_block(count: int) -> None:
        started = time.perf_counter()
        for _ in range(count):
            queue.push(Noop(), queue=QUEUE)
        times["project"] += time.perf_counter() - started

    def bare_block(count: int) -> None:
        times["bare"] += bare.push(conn, backend, QUEUE, count)

    blocks = [project_block, bare_block] if project_first else [bare_block, project_block]
    try:
        for offset in range(0, n, PUSH_BLOCK):
            for block in blocks:
                block(min(PUSH_BLOCK, n - offset))
    finally:
        conn.close()
    if (pushed := _project_count(backend)) != n:
        raise SystemExit(f"bench: {backend} project push left {pushed} rows, expected {n}")
    if (pushed := bare.count(backend, QUEUE)) != n:
        raise SystemExit(f"bench: {backend} bare push left {pushed} rows, expected {n}")
    return {"project_push": n / times["project"], "bare_push": n / times["bare"]}


def project_drain(backend: str, n: int) -> dict[str, float]:
    """Drain the N project jobs with a Worker in a fresh process; return jobs/s and its connects."""
    _vacuum(backend)
    _close_django_connections()
    drained = _run_child("bench.drain", ["--connection", _connection(backend), "--queue", QUEUE, "--n", str(n)])
    left, failed = _project_count(backend), _failed_count(backend)
    if left or failed:
        raise SystemExit(f"bench: {backend} project drain left {left} rows and recorded {failed} failed jobs")
    return {"project_drain": drained["rate"], "drain_connects": drained["connects"]}


def bare_drain(backend: str, n: int, *, async_commit: bool = False) -> dict[str, float]:
    """Drain the N bare jobs with the bare loop in a fresh process; return jobs/s."""
    from bench import bare

    _vacuum(backend)
    _close_django_connections()
    args = ["--backend", backend, "--queue", QUEUE, "--n", str(n), *(["--async-commit"] if async_commit else [])]
    rate = float(_run_child("bench.bare", args)["rate"])
    if left := bare.count(backend, QUEUE):
        raise SystemExit(f"bench: {backend} bare drain left {left} rows")
    return {"bare_drain_async" if async_commit else "bare_drain": rate}


def like_for_like_drain(backend: str, n: int) -> dict[str, float]:
    """PostgreSQL only: push N bare jobs (untimed), drain them with ``synchronous_commit = off``.

    The project's worker connection commits asynchronously; the reference loop of the issue
    commits synchronously. This supplementary figure is the bare loop in the project's commit mode.
    """
    from bench import bare

    conn = bare.connect(backend, autocommit=True)
    try:
        bare.push(conn, backend, QUEUE, n)
    finally:
        conn.close()
    return bare_drain(backend, n, async_commit=True)


def stale_drain(backend: str, n: int) -> dict[str, float]:
    """PostgreSQL only: the project drain of N jobs WITHOUT a fresh ANALYZE (the table's normal life).

    The jobs table is analyzed while it holds three reserved rows, then N jobs arrive (pushed
    untimed with push_many) and the worker drains them; autovacuum is off on the table meanwhile, so
    no ANALYZE refreshes the statistics halfway. Every other drain of this benchmark runs on fresh
    statistics (``_vacuum``), which the claim's plan must not depend on (claim.py, "Plan stability").
    """
    from bench.jobs import Noop
    from kinetis_queue import queues

    queue = queues[_connection(backend)]
    _project_sql(backend, "ALTER TABLE kinetis_queue_jobs SET (autovacuum_enabled = false)")
    try:
        _project_sql(backend, "VACUUM kinetis_queue_jobs")
        queue.push_many([Noop() for _ in range(3)], queue=QUEUE)
        _project_sql(
            backend, "UPDATE kinetis_queue_jobs SET reserved_at = %s, reserved_token = md5(id::text)", [time.time()]
        )
        _project_sql(backend, "ANALYZE kinetis_queue_jobs")
        _project_sql(backend, "DELETE FROM kinetis_queue_jobs")
        queue.push_many([Noop() for _ in range(n)], queue=QUEUE)
        _close_django_connections()
        drained = _run_child("bench.drain", ["--connection", _connection(backend), "--queue", QUEUE, "--n", str(n)])
    finally:
        _project_sql(backend, "ALTER TABLE kinetis_queue_jobs RESET (autovacuum_enabled)")
    if left := _project_count(backend):
        raise SystemExit(f"bench: {backend} stale-statistics drain left {left} rows")
    return {"project_drain_stale": drained["rate"]}


def measure(backend: str, n: int, repeat: int) -> dict[str, list[float]]:
    """``repeat`` rounds of both sides (which side goes first alternates); every sample of every metric."""
    from bench import bare

    samples: dict[str, list[float]] = {}
    for run in range(repeat):
        _reset(backend)
        project_first = run % 2 == 0
        result = push_phase(backend, n, project_first)
        drains = [project_drain, bare_drain] if project_first else [bare_drain, project_drain]
        for drain in drains:
            result.update(drain(backend, n))
        if bare.vendor(backend) == "postgresql":
            result.update(like_for_like_drain(backend, n))
            result.update(stale_drain(backend, n))
        for metric, value in result.items():
            samples.setdefault(metric, []).append(value)
        _log(
            f"  {backend} run {run + 1}/{repeat}: "
            + "  ".join(f"{metric} {value:,.0f}" for metric, value in result.items())
        )
    _close_django_connections()
    return samples


# -- report ---------------------------------------------------------------------------------------


def summarize(samples: dict[str, list[float]]) -> dict[str, float]:
    """Medians of every metric, and the project / bare ratios of the medians."""
    medians = {metric: statistics.median(values) for metric, values in samples.items()}
    medians["push_ratio"] = medians["project_push"] / medians["bare_push"]
    medians["drain_ratio"] = medians["project_drain"] / medians["bare_drain"]
    if "bare_drain_async" in medians:
        medians["drain_ratio_async"] = medians["project_drain"] / medians["bare_drain_async"]
    return medians


def table(results: dict[str, dict[str, float]]) -> str:
    header = (
        "backend",
        "project push/s",
        "bare push/s",
        "push ratio",
        "project drain/s",
        "bare drain/s",
        "drain ratio",
    )
    rows = [header]
    for backend, m in results.items():
        rows.append(
            (
                backend,
                f"{m['project_push']:,.0f}",
                f"{m['bare_push']:,.0f}",
                f"{m['push_ratio']:.0%}",
                f"{m['project_drain']:,.0f}",
                f"{m['bare_drain']:,.0f}",
                f"{m['drain_ratio']:.0%}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for index, row in enumerate(rows):
        cells = [row[0].ljust(widths[0])]
        cells += [cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells))
        if index == 0:
            lines.append("  ".join("-" * width for width in widths))
    return "\n".join(lines)


def notes(results: dict[str, dict[str, float]], n: int) -> list[str]:
    """The supplementary lines: connections the worker opened, and the like-for-like PostgreSQL reference."""
    lines = [
        "connections opened by the project worker during a drain of N jobs (median): "
        + ", ".join(f"{backend} {m['drain_connects']:.0f}" for backend, m in results.items())
    ]
    lines += [
        f"WARNING  {backend}: the worker opened {m['drain_connects']:.0f} connections for {n} jobs "
        "(a reconnect per job?)"
        for backend, m in results.items()
        if m["drain_connects"] > 2
    ]
    for backend, m in results.items():
        if "project_drain_stale" in m:
            lines.append(
                f"{backend}, without a fresh ANALYZE (table analyzed holding 3 reserved rows, then N jobs): "
                f"project drain {m['project_drain_stale']:,.0f}/s, "
                f"{m['project_drain_stale'] / m['project_drain']:.0%} of the drain on fresh statistics"
            )
        if "bare_drain_async" in m:
            lines.append(
                f"{backend}, like for like (bare drain with synchronous_commit = off, as the project worker "
                f"commits): bare {m['bare_drain_async']:,.0f}/s, project at {m['drain_ratio_async']:.0%}"
            )
    return lines


def verdicts(results: dict[str, dict[str, float]]) -> dict[str, dict[str, Any]]:
    if TARGET_BACKEND not in results:
        return {}
    m = results[TARGET_BACKEND]
    return {
        kind: {"ratio": m[f"{kind}_ratio"], "target": target, "pass": m[f"{kind}_ratio"] >= target}
        for kind, target in TARGETS.items()
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup(args.backends)
    _log(f"bench: N={args.n}, repeat={args.repeat}, backends={','.join(args.backends)}")
    samples = {backend: measure(backend, args.n, args.repeat) for backend in args.backends}
    results = {backend: summarize(s) for backend, s in samples.items()}
    print(
        f"\nkinetis_queue vs bare driver: N={args.n} no-op jobs, median of {args.repeat}, "
        f"one worker process, CONN_MAX_AGE=0\n"
    )
    print(table(results))
    print()
    for line in notes(results, args.n):
        print(line)
    checks = verdicts(results)
    if checks:
        print()
        for kind, check in checks.items():
            status = "PASS" if check["pass"] else "FAIL"
            print(
                f"{status}  {TARGET_BACKEND} {kind}: project at {check['ratio']:.0%} of bare "
                f"(target >= {check['target']:.0%})"
            )
    if args.json is not None:
        import django

        report = {
            "n": args.n,
            "repeat": args.repeat,
            "queue": QUEUE,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "python": platform.python_version(),
            "django": django.get_version(),
            "cpus": os.cpu_count(),
            "results": {name: {"median": results[name], "samples": samples[name]} for name in results},
            "targets": checks,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
