"""``python -m bench.rabbitmq_batch``: the RabbitMQ backend's batch operations against its single ones.

Three figures, each a ratio measured within one run (this 2-core machine is shared, so absolute rates
drift; the sides of each ratio alternate in blocks so a load burst hits both alike):

- push: N ``push()`` calls (one confirm wait each) against ``push_many()`` of BATCH jobs (one confirm
  wait per batch), target >= 5x;
- drain: ``pop()`` + ``ack()`` per job against ``pop_many(K)`` + ``ack_many()``, same process, same
  connection kind;
- wake-up: an idle consumer waiting in ``pop_many()`` in a thread, a job pushed from a second
  connection; the time from just before the push until ``pop_many()`` returns, p50 and max (the push's
  own confirm wait is included, so this is an upper bound).

Every phase checks its counts (N delivered, the queue empty after), and the run aborts otherwise.
The queue is named after this process's id and deleted at the end.
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
from bench.rabbitmq import configure


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.rabbitmq_batch", description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=_positive_int, default=2000, help="jobs per side and phase (default 2000)")
    parser.add_argument("--batch", type=_positive_int, default=1000, help="push_many() batch (default 1000)")
    parser.add_argument("--limit", type=_positive_int, default=32, help="pop_many() limit (default 32)")
    parser.add_argument("--wakeups", type=_positive_int, default=30, help="wake-ups measured (default 30)")
    parser.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672//", help="the broker")
    return parser.parse_args(argv)


def _push_phase(queue: Any, name: str, n: int, batch: int) -> tuple[float, float]:
    from bench.jobs import Noop

    single = many = 0.0
    done = 0
    while done < n:  # alternate blocks of `batch` jobs
        count = min(batch, n - done)
        start = time.perf_counter()
        for _ in range(count):
            queue.push(Noop(), queue=name)
        single += time.perf_counter() - start
        start = time.perf_counter()
        queue.push_many([Noop() for _ in range(count)], queue=name)
        many += time.perf_counter() - start
        done += count
    return n / single, n / many


def _drain_phase(queue: Any, name: str, n: int, limit: int) -> tuple[float, float]:
    one = batched = 0.0
    left_one = left_batched = n
    block = max(limit, 200)
    while left_one or left_batched:
        start = time.perf_counter()
        for _ in range(min(block, left_one)):
            job = queue.pop(5, [name])
            if job is None:
                raise SystemExit("drain: the queue ran dry")
            queue.ack(job)
        one += time.perf_counter() - start
        left_one -= min(block, left_one)
        start = time.perf_counter()
        taken = 0
        while taken < min(block, left_batched):
            reserved = queue.pop_many(5, [name], min(limit, min(block, left_batched) - taken))
            if not reserved.jobs:
                raise SystemExit("drain: the queue ran dry")
            if any(result is not None for result in queue.ack_many(reserved.jobs)):
                raise SystemExit("drain: an ack was refused")
            taken += len(reserved.jobs)
        batched += time.perf_counter() - start
        left_batched -= taken
    return n / one, n / batched


def _wake_phase(worker: Any, pusher: Any, name: str, count: int) -> list[float]:
    from bench.jobs import Noop

    latencies: list[float] = []
    stamp = [0.0]
    got = threading.Event()
    failed: list[str] = []

    def wait_for_jobs() -> None:
        for _ in range(count):
            reserved = worker.pop_many(30, [name], 4)
            latencies.append(time.perf_counter() - stamp[0])
            if not reserved.jobs:
                failed.append("nothing arrived within 30 s")
                got.set()
                return
            worker.ack_many(reserved.jobs)
            got.set()

    worker.pop_many(0.01, [name], 4)  # starts the consumer
    thread = threading.Thread(target=wait_for_jobs)
    thread.start()
    for _ in range(count):
        time.sleep(0.05)  # the worker is idle in its wait again
        got.clear()
        stamp[0] = time.perf_counter()
        pusher.push(Noop(), queue=name)
        got.wait(60)
    thread.join()
    if failed:
        raise SystemExit(f"wake-up: {failed[0]}")
    return latencies


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    configure(args.url)
    from kinetis_queue.backends.rabbitmq import RabbitMqQueue

    name = f"bench-batch-{os.getpid()}"
    queue, pusher = RabbitMqQueue(url=args.url), RabbitMqQueue(url=args.url)
    try:
        queue.push_many([], queue=name)
        queue.size(name)
        single, many = _push_phase(queue, name, args.n, args.batch)
        if queue.size(name) != 2 * args.n:
            raise SystemExit(f"push: {queue.size(name)} queued, expected {2 * args.n}")
        log(f"push: {single:,.0f}/s single, {many:,.0f}/s push_many({args.batch}): {many / single:.1f}x (target 5x)")
        one, batched = _drain_phase(queue, name, args.n, args.limit)
        if queue.size(name) != 0:
            raise SystemExit(f"drain: {queue.size(name)} left")
        log(f"drain: {one:,.0f}/s pop+ack, {batched:,.0f}/s pop_many({args.limit})+ack_many: {batched / one:.1f}x")
        latencies = _wake_phase(queue, pusher, name, args.wakeups)
        log(
            f"wake-up of an idle pop_many() by a push: p50 {statistics.median(latencies) * 1000:.2f} ms, "
            f"max {max(latencies) * 1000:.2f} ms over {len(latencies)} (target p50 < 5 ms)"
        )
    finally:
        queue.delete(name)
        queue.dispose()
        pusher.dispose()


if __name__ == "__main__":
    main()
