"""``python -m bench.flow``: what flow control costs a push and a drain (issue 30), in one process, on Redis.

N no-op jobs are pushed one ``push()`` at a time (the push hot path) and drained by ``Worker.run(stop_when_empty=
True)``, once per side, in blocks of N jobs, the sides' order rotating so a load burst on this shared machine hits
every side alike:

- ``off``: KINETIS_QUEUE["MIDDLEWARE"] without ExpiryMiddleware and RateLimitMiddleware (the chain before them);
- ``on``: the default chain, plain jobs (what every user pays for the features being there);
- ``on, expires``: every job pushed with ``expires=3600`` (its admission check runs);
- ``on, rate limited``: every job pushed with ``rate_limit=(10_000, 0.001)`` (never throttled: the cost of
  counting each start, one take_rate.lua call per delivery).

Push and drain jobs/s per side (medians of the blocks) and the paired ratios to ``off`` (each block against the
``off`` block of its repeat) are printed. Nothing is asserted: this is a measurement.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import log
from bench.common import positive_int as _positive_int

BLOCK = 3000
SIDES: dict[str, dict[str, Any]] = {
    "off": {},
    "on": {},
    "on, expires": {"expires": 3600},
    "on, rate limited": {"rate_limit": (10_000, 0.001)},
}
WITHOUT = ("kinetis_queue.expiry.ExpiryMiddleware", "kinetis_queue.ratelimits.RateLimitMiddleware")


def configure(url: str, prefix: str) -> None:
    from django.conf import settings

    settings.configure(
        SECRET_KEY="kinetis-queue-bench",
        USE_TZ=True,
        INSTALLED_APPS=["django.contrib.contenttypes", "kinetis_queue", "bench"],
        DATABASES={
            "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": str(Path(tempfile.mkdtemp()) / "flow.sqlite3")}
        },
        KINETIS_QUEUE={
            "CONNECTIONS": {"default": {"BACKEND": "redis", "URL": url, "PREFIX": prefix}},
            "HISTORY": False,
        },
        LOGGING={"version": 1, "disable_existing_loggers": False, "loggers": {"kinetis_queue": {"level": "WARNING"}}},
    )
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, skip_checks=True)


def block(side: str, n: int, queue_name: str) -> tuple[float, float]:
    """Push and drain jobs/s of one block with ``side``'s chain and push options."""
    from django.conf import settings
    from django.test.utils import override_settings

    from bench.jobs import Noop
    from kinetis_queue import queues
    from kinetis_queue.middleware import DEFAULT_MIDDLEWARE
    from kinetis_queue.worker import Worker

    chain = [path for path in DEFAULT_MIDDLEWARE if side != "off" or path not in WITHOUT]
    options = SIDES[side]
    if "rate_limit" in options:
        options = {**options, "rate_key": uuid.uuid4().hex}
    with override_settings(KINETIS_QUEUE={**settings.KINETIS_QUEUE, "MIDDLEWARE": chain}):
        queue = queues["default"]
        queue.push(Noop(), queue=queue_name, **options)  # the chain and the connection built before the clock
        started = time.perf_counter()
        for _ in range(n - 1):
            queue.push(Noop(), queue=queue_name, **options)
        pushed = (n - 1) / (time.perf_counter() - started)
        worker = Worker(queue, recorder=None)
        started = time.perf_counter()
        worker.run(0.05, [queue_name], stop_when_empty=True)
        drained = n / (time.perf_counter() - started)
        worker.close()
        assert worker.processed == n, (side, worker.processed)
    return pushed, drained


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=_positive_int, default=BLOCK, help=f"jobs per block (default {BLOCK})")
    parser.add_argument("--repeat", type=_positive_int, default=5, help="blocks per side (default 5)")
    parser.add_argument("--url", default="redis://127.0.0.1:6379/13")
    options = parser.parse_args()
    configure(options.url, f"kqbench_flow_{uuid.uuid4().hex[:8]}:")
    sides = list(SIDES)
    rates: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
    for repeat in range(options.repeat):
        shift = repeat % len(sides)
        for side in sides[shift:] + sides[:shift]:
            rates[side].append(block(side, options.n, "flow" + uuid.uuid4().hex[:10]))
            log(f"{side}: push {rates[side][-1][0]:,.0f}/s, drain {rates[side][-1][1]:,.0f}/s")
    print("\n| side | push/s (median) | vs off (paired) | drain/s (median) | vs off (paired) |")
    print("|---|---:|---:|---:|---:|")
    for side in sides:
        push = statistics.median(p for p, _ in rates[side])
        drain = statistics.median(d for _, d in rates[side])
        push_ratio = statistics.median(p / o for (p, _), (o, _) in zip(rates[side], rates["off"], strict=True))
        drain_ratio = statistics.median(d / o for (_, d), (_, o) in zip(rates[side], rates["off"], strict=True))
        print(f"| {side} | {push:,.0f} | {push_ratio:.3f} | {drain:,.0f} | {drain_ratio:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
