"""``python -m bench.observability``: what the observability parts cost a worker's drain, in one process.

On Redis (the fastest store here, so a per-job cost shows most), N no-op jobs are pushed with
``push_many`` and drained by ``Worker.run(stop_when_empty=True)`` with each set of hooks in turn, blocks
of N jobs at a time, the sides' order rotating, so a load burst on this shared machine hits every side
alike:

- ``off``: no observability at all (HISTORY off, no worker registry): the chains-and-batches hooks only;
- ``default``: what ``queue_work`` runs out of the box: the worker registry, HISTORY, the correlation id;
- ``+ metrics``, ``+ tracing``, ``+ job log``: the default and one switch;
- ``all on``: the registry, HISTORY, METRICS, TRACING (the OpenTelemetry API, no SDK: what a project
  without an exporter pays) and JOB_LOG (its records filtered out by the logger's level);
- ``all on, logged``: the same with ``kinetis_queue.jobs`` at INFO writing JsonFormatter lines to a file,
  what a project shipping one JSON line per job pays (Python's logging, mostly).

Jobs/s per side (medians of the blocks) and the ratios to ``off`` are printed, both of the medians and
the median of each repeat's ratio (paired: a drift of this shared machine's speed cancels within a
repeat); the issue's target is ``all on`` at most 5 % below ``off``, judged on the paired ratio.
Nothing is asserted: this is a measurement.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import log
from bench.common import positive_int as _positive_int

BLOCK = 10_000
#: Each side's switches; the registry and HISTORY are on in every side but "off".
SIDES: dict[str, tuple[str, ...]] = {
    "off": (),
    "default": (),
    "+ metrics": ("METRICS",),
    "+ tracing": ("TRACING",),
    "+ job log": ("JOB_LOG",),
    "all on": ("METRICS", "TRACING", "JOB_LOG"),
    "all on, logged": ("METRICS", "TRACING", "JOB_LOG"),
}
#: The sides whose job records are written (to a JSON lines file).
LOGGED = ("all on, logged",)


def configure(url: str, prefix: str) -> None:
    from django.conf import settings

    settings.configure(
        SECRET_KEY="kinetis-queue-bench",
        USE_TZ=True,
        INSTALLED_APPS=["django.contrib.contenttypes", "kinetis_queue", "bench"],
        DATABASES={
            "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(Path(tempfile.mkdtemp()) / "obs.sqlite3")}
        },
        KINETIS_QUEUE={"CONNECTIONS": {"default": {"BACKEND": "redis", "URL": url, "PREFIX": prefix}}},
        LOGGING={"version": 1, "disable_existing_loggers": False, "loggers": {"kinetis_queue": {"level": "WARNING"}}},
    )
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, skip_checks=True)


def _hooks(side: str) -> Any:
    """The side's hooks (as a Worker of queue_work gets them) and the settings override they need."""
    from django.conf import settings
    from django.test.utils import override_settings

    from kinetis_queue.hooks import HookChain, default_hooks
    from kinetis_queue.observability.registry import WorkerRegistry

    switches = {name: True for name in SIDES[side]}
    if side == "off":
        switches["HISTORY"] = False
    override = override_settings(KINETIS_QUEUE={**settings.KINETIS_QUEUE, **switches})
    override.enable()
    if side == "off":
        return default_hooks(), override
    return HookChain([default_hooks(), WorkerRegistry("default", ["bench"], 1)]), override


def _log_handler() -> logging.Handler:
    """kinetis_queue.jobs at INFO, one JSON line per record into a temporary file."""
    from kinetis_queue.observability.logs import JsonFormatter

    handler = logging.FileHandler(Path(tempfile.mkdtemp()) / "jobs.jsonl")
    handler.setFormatter(JsonFormatter())
    jobs = logging.getLogger("kinetis_queue.jobs")
    jobs.addHandler(handler)
    jobs.setLevel(logging.INFO)
    return handler


def drain(side: str, n: int, queue_name: str) -> float:
    """Jobs/s of one block drained with ``side``'s hooks."""
    from bench.jobs import Noop
    from kinetis_queue import queues
    from kinetis_queue.worker import Worker

    hooks, override = _hooks(side)
    handler = _log_handler() if side in LOGGED else None
    try:
        queue = queues["default"]
        for start in range(0, n, 1000):
            queue.push_many([Noop() for _ in range(min(1000, n - start))], queue=queue_name)
        worker = Worker(queue, recorder=None, hooks=hooks)
        started = time.perf_counter()
        worker.run(0.05, [queue_name], stop_when_empty=True)
        seconds = time.perf_counter() - started
        worker.close()
        assert worker.processed == n, (side, worker.processed)
    finally:
        override.disable()
        if handler is not None:
            logging.getLogger("kinetis_queue.jobs").removeHandler(handler)
            logging.getLogger("kinetis_queue.jobs").setLevel(logging.NOTSET)
            handler.close()
    return n / seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=_positive_int, default=BLOCK, help=f"jobs per block (default {BLOCK})")
    parser.add_argument("--repeat", type=_positive_int, default=6, help="blocks per side (default 6)")
    parser.add_argument("--url", default="redis://127.0.0.1:6379/13")
    options = parser.parse_args()
    configure(options.url, f"kqbench_obs_{uuid.uuid4().hex[:8]}:")
    sides = list(SIDES)
    rates: dict[str, list[float]] = {side: [] for side in sides}
    for repeat in range(options.repeat):
        shift = repeat % len(sides)
        for side in sides[shift:] + sides[:shift]:
            rates[side].append(drain(side, options.n, "obs" + uuid.uuid4().hex[:10]))
            log(f"{side}: {rates[side][-1]:,.0f} jobs/s")
    medians = {side: statistics.median(values) for side, values in rates.items()}
    # Paired: each repeat's side against that repeat's "off", so a slow drift of the machine cancels.
    paired = {
        side: statistics.median(rate / off for rate, off in zip(rates[side], rates["off"], strict=True))
        for side in sides
    }
    print("\n| hooks | drain jobs/s (median) | min-max | vs off (medians) | vs off (paired, median) |")
    print("|---|---:|---:|---:|---:|")
    for side in sides:
        low, high = min(rates[side]), max(rates[side])
        print(
            f"| {side} | {medians[side]:,.0f} | {low:,.0f}-{high:,.0f} | {medians[side] / medians['off']:.3f} "
            f"| {paired[side]:.3f} |"
        )
    cost = 1 - paired["all on"]
    verdict = "MET" if cost <= 0.05 else "MISSED"
    print(f"\nall on costs {cost:.1%} of the drain with it off (target: at most 5%): {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
