"""Dramatiq on Redis: ``dramatiq -p 1 -t T`` on this module's broker.

Two rows: one thread with ``dramatiq_queue_prefetch=64`` (the fastest single-process setting found
in /work notes: with one thread the default prefetch window of 2 messages makes the consumer back
off as if the queue were empty) and the default 8 threads. The I/O-bound workload runs ``-t 16``.
The broker and actors are built on first access of ``broker`` (PEP 562 ``__getattr__``), from the
BENCH_PEERS_* environment, so importing this module on the harness side touches no library.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from bench.peers import probe
from bench.peers.base import Peer, Pusher, Settings

_built: dict[str, Any] = {}


def _build() -> dict[str, Any]:
    if not _built:
        import dramatiq
        from dramatiq.brokers.redis import RedisBroker

        broker = RedisBroker(url=os.environ["BENCH_PEERS_REDIS_URL"])
        dramatiq.set_broker(broker)
        queue = os.environ["BENCH_PEERS_QUEUE"]
        _built["broker"] = broker
        for fn in (probe.tick, probe.nap, probe.stamp):
            _built[fn.__name__] = dramatiq.actor(fn, actor_name=fn.__name__, queue_name=queue, max_retries=0)
    return _built


def __getattr__(name: str) -> Any:
    if name == "broker":
        return _build()["broker"]
    raise AttributeError(name)


class Dramatiq(Peer):
    store = "redis"

    def __init__(self, threads: int, prefetch: int | None) -> None:
        self.threads, self.prefetch = threads, prefetch
        self.name = f"dramatiq-t{threads}"
        self.label = f"Dramatiq {threads} thread{'s' if threads > 1 else ''}" + (
            f", prefetch {prefetch}" if prefetch else ""
        )

    def worker_argv(self, settings: Settings, io: bool) -> list[str]:
        threads = 16 if io else self.threads
        queue = self.queue(settings)
        return [
            sys.executable,
            "-m",
            "dramatiq",
            "bench.peers.dramatiq_peer:broker",
            "-p",
            "1",
            "-t",
            str(threads),
            "-Q",
            queue,
        ]

    def worker_env(self, settings: Settings, io: bool) -> dict[str, str]:
        return {"dramatiq_queue_prefetch": str(self.prefetch)} if self.prefetch and not io else {}

    def setting(self, io: bool) -> str:
        if io:
            return "-p 1 -t 16"
        return f"-p 1 -t {self.threads}" + (f", dramatiq_queue_prefetch={self.prefetch}" if self.prefetch else "")

    def pusher(self, kind: str, run: str, n: int, ms: int) -> Pusher:
        actors = _build()
        if kind == "tick":
            return lambda: actors["tick"].send(run, n)
        return lambda: actors["nap"].send(run, n, ms)

    def push_stamp(self, run: str, pushed_at: float) -> None:
        _build()["stamp"].send(run, pushed_at)

    def clear(self, settings: Settings) -> None:
        broker = _build()["broker"]
        broker.flush(self.queue(settings))
