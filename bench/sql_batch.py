"""``python -m bench.sql_batch``: the SQL backend's batch operations and wake-ups, side by side in one run.

Four measurements per database (sql-postgres, sql-mariadb, sql-sqlite), each a same-run ratio:

- push: N single ``push()`` calls against ``push_many()`` of N jobs, alternating, ``--repeat`` rounds;
- drain (queue level, no Worker): N jobs drained by ``pop()`` + ``ack()`` against ``pop_many(LIMIT)``
  + ``ack_many()``;
- PostgreSQL, planner statistics: the ``pop()`` + ``ack()`` drain of N jobs after a fresh
  ``ANALYZE`` (no VACUUM, so that only the statistics differ), against the same drain on a table
  last analyzed while it held three reserved rows (autovacuum off on the table meanwhile, so the
  statistics stay stale: the normal life of a queue table; ``python -m bench`` measures it too);
- wake-up: an idle ``pop()`` on a thread, a push every PUSH_GAP seconds: push-to-delivery latency
  p50/p95 (PostgreSQL: LISTEN/NOTIFY; MariaDB and SQLite: POLL_PAUSE polling).

It writes only its own queue's rows, but the statistics measurement analyzes the whole table: run it
on a database of its own (``KINETIS_BENCH_DB=kinetis_bench_sql python -m bench.sql_batch``). Prints
one JSON object per database.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
from typing import Any

from bench.common import log as _log
from bench.common import positive_int as _positive_int

QUEUE = "bench-batch"
LIMIT = 32
PUSH_GAP = 0.05
BACKENDS = {
    "sql-postgres": ("postgres", "postgres"),
    "sql-mariadb": ("mariadb", "mariadb"),
    "sql-sqlite": ("sqlite", "default"),
}


def _sql(alias: str, sql: str, params: list[Any] | None = None) -> None:
    from django.db import connections

    with connections[alias].cursor() as cursor:
        cursor.execute(sql, params)


def _clear(alias: str) -> None:
    _sql(alias, "DELETE FROM kinetis_queue_jobs WHERE queue = %s", [QUEUE])


def push_rates(connection: str, alias: str, n: int, repeat: int) -> dict[str, float]:
    from bench.jobs import Noop
    from kinetis_queue import queues

    queue = queues[connection]
    single = many = 0.0
    for round_ in range(repeat):
        for kind in ("single", "many") if round_ % 2 == 0 else ("many", "single"):
            jobs = [Noop() for _ in range(n)]
            started = time.perf_counter()
            if kind == "single":
                for job in jobs:
                    queue.push(job, queue=QUEUE)
                single += time.perf_counter() - started
            else:
                queue.push_many(jobs, queue=QUEUE)
                many += time.perf_counter() - started
            _clear(alias)
    rates = {"push_per_s": n * repeat / single, "push_many_per_s": n * repeat / many}
    rates["push_many_ratio"] = rates["push_many_per_s"] / rates["push_per_s"]
    return rates


def _fill(connection: str, n: int) -> None:
    from bench.jobs import Noop
    from kinetis_queue import queues

    queues[connection].push_many([Noop() for _ in range(n)], queue=QUEUE)


def _drain(queue: Any, n: int, limit: int) -> float:
    """Seconds to pop and ack ``n`` jobs: one at a time (limit 1) or ``limit`` per claim and ack."""
    started = time.perf_counter()
    done = 0
    while done < n:
        if limit == 1:
            job = queue.pop(0.5, [QUEUE])
            if job is None:
                raise SystemExit(f"drain ran dry after {done}")
            queue.ack(job)
            done += 1
        else:
            held = queue.pop_many(0.5, [QUEUE], limit).jobs
            if not held:
                raise SystemExit(f"drain ran dry after {done}")
            if any(queue.ack_many(held)):
                raise SystemExit("an ack was refused")
            done += len(held)
    return time.perf_counter() - started


def _fresh_queue(connection: str) -> Any:
    from kinetis_queue import connections

    return connections.build(connection)


def drain_rates(connection: str, alias: str, n: int, repeat: int, vendor: str) -> dict[str, float]:
    samples: dict[str, list[float]] = {"drain_pop_ack_per_s": [], f"drain_pop_many_{LIMIT}_per_s": []}
    for round_ in range(repeat):
        for limit in (1, LIMIT) if round_ % 2 == 0 else (LIMIT, 1):
            _fill(connection, n)
            if vendor == "postgresql":
                _sql(alias, "VACUUM ANALYZE kinetis_queue_jobs")
            queue = _fresh_queue(connection)
            try:
                queue.pop(0.01, ["bench-none"])  # opens the worker's connection before the clock (0 would wait forever)
                seconds = _drain(queue, n, limit)
            finally:
                queue.dispose()
            key = "drain_pop_ack_per_s" if limit == 1 else f"drain_pop_many_{LIMIT}_per_s"
            samples[key].append(n / seconds)
    rates = {key: statistics.median(values) for key, values in samples.items()}
    rates["drain_batch_ratio"] = rates[f"drain_pop_many_{LIMIT}_per_s"] / rates["drain_pop_ack_per_s"]
    return rates


def statistics_rates(connection: str, alias: str, n: int, repeat: int) -> dict[str, float]:
    """PostgreSQL: pop()+ack() drain with fresh statistics against stale ones (analyzed nearly empty)."""
    samples: dict[str, list[float]] = {"fresh": [], "stale": []}
    try:
        _sql(alias, "ALTER TABLE kinetis_queue_jobs SET (autovacuum_enabled = false)")
        for round_ in range(repeat):
            for kind in ("fresh", "stale") if round_ % 2 == 0 else ("stale", "fresh"):
                if kind == "stale":
                    _fill(connection, 3)
                    now = time.time()
                    _sql(alias, "UPDATE kinetis_queue_jobs SET reserved_at = %s, reserved_token = md5(id::text)", [now])
                    _sql(alias, "ANALYZE kinetis_queue_jobs")
                    _clear(alias)
                    _fill(connection, n)
                else:
                    _fill(connection, n)
                    _sql(alias, "ANALYZE kinetis_queue_jobs")  # statistics only: no VACUUM on either side
                queue = _fresh_queue(connection)
                try:
                    queue.pop(0.01, ["bench-none"])
                    samples[kind].append(n / _drain(queue, n, 1))
                finally:
                    queue.dispose()
    finally:
        _sql(alias, "ALTER TABLE kinetis_queue_jobs RESET (autovacuum_enabled)")
    fresh, stale = statistics.median(samples["fresh"]), statistics.median(samples["stale"])
    return {"drain_fresh_stats_per_s": fresh, "drain_stale_stats_per_s": stale, "stale_over_fresh": stale / fresh}


def wakeup(connection: str, pushes: int) -> dict[str, float]:
    """An idle pop() on a thread; a push every PUSH_GAP s; push-to-delivery latency in ms."""
    from bench.jobs import Noop
    from kinetis_queue import connections

    waiter = connections.build(connection)
    pusher = connections.build(connection)
    delivered: list[float] = []
    stop = threading.Event()

    def wait_loop() -> None:
        while not stop.is_set():
            job = waiter.pop(0.5, [QUEUE])
            if job is not None:
                delivered.append(time.perf_counter())
                waiter.ack(job)

    thread = threading.Thread(target=wait_loop, daemon=True)
    thread.start()
    time.sleep(0.5)  # the waiter reaches its idle wait (and LISTENs) before the first push
    latencies = []
    try:
        for _ in range(pushes):
            before = len(delivered)
            started = time.perf_counter()
            pusher.push(Noop(), queue=QUEUE)
            deadline = time.monotonic() + 5
            while len(delivered) == before and time.monotonic() < deadline:
                time.sleep(0.0005)
            if len(delivered) == before:
                raise SystemExit("a pushed job was not delivered within 5 s")
            latencies.append((delivered[-1] - started) * 1000)
            time.sleep(PUSH_GAP)
    finally:
        stop.set()
        thread.join(5)
        waiter.dispose()
        pusher.dispose()
    ordered = sorted(latencies)
    return {
        "wakeup_p50_ms": statistics.median(ordered),
        "wakeup_p95_ms": ordered[int(len(ordered) * 0.95) - 1],
        "poll_pause_s": waiter.poll_pause,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sql_batch", description=__doc__)
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--n", type=_positive_int, default=1000)
    parser.add_argument("--drain-n", type=_positive_int, default=3000)
    parser.add_argument("--repeat", type=_positive_int, default=3)
    parser.add_argument("--pushes", type=_positive_int, default=40)
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    from bench.settings import create_databases

    names = [name for name in args.backends.split(",") if name]
    create_databases([BACKENDS[name][1] for name in names])
    django.setup()
    from django.core.management import call_command
    from django.db import connections

    for name in names:
        connection, alias = BACKENDS[name]
        call_command("migrate", database=alias, verbosity=0)
        _clear(alias)
        vendor = connections[alias].vendor
        result: dict[str, Any] = {"backend": name}
        result.update(push_rates(connection, alias, args.n, args.repeat))
        result.update(drain_rates(connection, alias, args.drain_n, args.repeat, vendor))
        if vendor == "postgresql":
            result.update(statistics_rates(connection, alias, args.drain_n, args.repeat))
        result.update(wakeup(connection, args.pushes))
        _log(f"  {name} done")
        print(
            json.dumps({key: round(value, 3) if isinstance(value, float) else value for key, value in result.items()})
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
