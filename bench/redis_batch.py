"""``python -m bench.redis_batch``: the Redis backend's batch operations and wake-up, in one process.

Three measurements, each a ratio of two sides run in the same process, interleaved in blocks so a
load burst on this shared machine hits both sides alike:

- push: N single ``push()`` calls against ``push_many()`` of BATCH jobs at a time, and against a
  bare redis-py ``LPUSH`` of a same-shaped envelope;
- drain: ``pop()`` + ``ack()`` per job against ``pop_many(LIMIT)`` + ``ack_many()`` of what came back;
- wake-up: a thread blocked in ``pop()`` on an empty queue, then one push: the time from just before
  the push to the delivery in the popping thread, over SAMPLES pushes (p50 and p95).

The figures are printed, never asserted: speed claims belong here, not in the tests.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from typing import Any

from bench.common import log
from bench.common import positive_int as _positive_int
from bench.redis import bare_envelope, configure

QUEUE = "batchbench"
#: Jobs per push_many() call (the issue's figure: 1,000).
BATCH = 1000
#: Jobs per pop_many() call in the batched drain.
LIMIT = 32
#: Pushes the wake-up latency is measured over.
SAMPLES = 60


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def measure_push(queue: Any, n: int, repeat: int) -> dict[str, float]:
    """Jobs/s of single pushes, push_many(BATCH) and bare LPUSH, alternating by blocks of BATCH."""
    import redis

    from bench.jobs import Noop

    bare = redis.Redis.from_url(queue_url)
    bare_key = f"{queue.prefix}bare:pending"
    seconds = {"push": 0.0, "push_many": 0.0, "bare": 0.0}
    done = dict.fromkeys(seconds, 0)
    for _ in range(repeat):
        for _block in range(max(1, n // BATCH)):
            started = time.perf_counter()
            for _job in range(BATCH):
                queue.push(Noop(), queue=QUEUE)
            seconds["push"] += time.perf_counter() - started
            done["push"] += BATCH
            if hasattr(queue, "push_many"):
                jobs = [Noop() for _ in range(BATCH)]
                started = time.perf_counter()
                queue.push_many(jobs, queue=QUEUE)
                seconds["push_many"] += time.perf_counter() - started
                done["push_many"] += BATCH
            started = time.perf_counter()
            for _job in range(BATCH):
                bare.lpush(bare_key, bare_envelope())
            seconds["bare"] += time.perf_counter() - started
            done["bare"] += BATCH
            queue.clear(QUEUE)
            bare.delete(bare_key)
    bare.close()
    return {side: _rate(done[side], seconds[side]) for side in seconds if done[side]}


def measure_drain(queue: Any, n: int, repeat: int) -> dict[str, float]:
    """Jobs/s drained by pop()+ack() and by pop_many(LIMIT)+ack_many(), alternating by blocks of BATCH."""
    from bench.jobs import Noop

    seconds = {"pop+ack": 0.0, f"pop_many({LIMIT})+ack_many": 0.0}
    done = dict.fromkeys(seconds, 0)
    for _ in range(repeat):
        for _block in range(max(1, n // BATCH)):
            queue.push_many([Noop() for _ in range(BATCH)], queue=QUEUE)
            started = time.perf_counter()
            for _job in range(BATCH):
                job = queue.pop(1, [QUEUE])
                queue.ack(job)
            seconds["pop+ack"] += time.perf_counter() - started
            done["pop+ack"] += BATCH
            queue.push_many([Noop() for _ in range(BATCH)], queue=QUEUE)
            started = time.perf_counter()
            left = BATCH
            while left:
                reserved = queue.pop_many(1, [QUEUE], LIMIT)
                assert not any(queue.ack_many(reserved.jobs))
                left -= len(reserved.jobs)
            seconds[f"pop_many({LIMIT})+ack_many"] += time.perf_counter() - started
            done[f"pop_many({LIMIT})+ack_many"] += BATCH
    return {side: _rate(done[side], seconds[side]) for side in seconds}


def measure_wake(queue: Any) -> dict[str, float]:
    """Milliseconds from just before a push to its delivery in a thread blocked in pop() (p50, p95)."""
    from bench.jobs import Noop

    pushed_at: list[float] = []
    latencies: list[float] = []
    waiting = threading.Event()

    def popper() -> None:
        for _ in range(SAMPLES):
            waiting.set()
            job = queue.pop(10, [QUEUE])
            latencies.append(time.perf_counter() - pushed_at[-1])
            queue.ack(job)

    thread = threading.Thread(target=popper)
    thread.start()
    for _ in range(SAMPLES):
        waiting.wait()
        waiting.clear()
        time.sleep(0.05)  # the popper has swept the empty queue and is waiting
        pushed_at.append(time.perf_counter())
        queue.push(Noop(), queue=QUEUE)
    thread.join()
    ms = sorted(value * 1000 for value in latencies)
    return {"p50 ms": statistics.median(ms), "p95 ms": ms[int(len(ms) * 0.95) - 1]}


queue_url = "redis://127.0.0.1:6379/0"


def main() -> None:
    global queue_url
    parser = argparse.ArgumentParser(prog="python -m bench.redis_batch", description=__doc__)
    parser.add_argument("--n", type=_positive_int, default=5000, help="jobs per side and repeat (default 5000)")
    parser.add_argument("--repeat", type=_positive_int, default=1)
    parser.add_argument("--url", default=queue_url)
    parser.add_argument("--only", choices=["push", "drain", "wake"], action="append")
    args = parser.parse_args()
    queue_url = args.url
    prefix = f"kinetis_bench_batch_{os.getpid()}:"
    configure(args.url, prefix)
    from kinetis_queue import connections

    queue: Any = connections.build("redis")
    only = args.only or ["push", "drain", "wake"]
    try:
        if "push" in only:
            rates = measure_push(queue, args.n, args.repeat)
            log(f"push jobs/s: { {k: round(v) for k, v in rates.items()} }")
            if "push_many" in rates:
                log(f"  push_many({BATCH}) / push = {rates['push_many'] / rates['push']:.1f}x")
            log(f"  push / bare LPUSH = {rates['push'] / rates['bare']:.2f}")
        if "drain" in only:
            rates = measure_drain(queue, args.n, args.repeat)
            log(f"drain jobs/s: { {k: round(v) for k, v in rates.items()} }")
            values = list(rates.values())
            log(f"  batched / single = {values[1] / values[0]:.1f}x")
        if "wake" in only:
            figures = measure_wake(queue)
            log(f"idle pop wake-up latency: { {k: round(v, 2) for k, v in figures.items()} }")
    finally:
        queue.clear(QUEUE)
        queue.dispose()


if __name__ == "__main__":
    main()
