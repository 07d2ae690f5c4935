"""Huey on Redis: ``huey_consumer -w 1 -k thread`` (Huey's default: one worker thread, blocking pops).

Huey pops a message and runs it with no acknowledgement (at-most-once): a faster contract than the
project's, measured as it is. The I/O-bound workload runs ``-w 16 -k thread``. The Huey instance and
tasks are built on first access of ``huey`` from the BENCH_PEERS_* environment.
"""

from __future__ import annotations

import os
from typing import Any

from bench.peers import probe
from bench.peers.base import Peer, Pusher, Settings, bin_path

_built: dict[str, Any] = {}


def _build() -> dict[str, Any]:
    if not _built:
        from huey import RedisHuey

        huey = RedisHuey(os.environ["BENCH_PEERS_QUEUE"], url=os.environ["BENCH_PEERS_REDIS_URL"])
        _built["huey"] = huey
        for fn in (probe.tick, probe.nap, probe.stamp):
            _built[fn.__name__] = huey.task(name=fn.__name__)(fn)
    return _built


def __getattr__(name: str) -> Any:
    if name == "huey":
        return _build()["huey"]
    raise AttributeError(name)


class Huey(Peer):
    name = "huey"
    label = "Huey 1 thread"
    store = "redis"

    def worker_argv(self, settings: Settings, io: bool) -> list[str]:
        return [
            bin_path("huey_consumer"),
            "bench.peers.huey_peer.huey",
            "-w",
            "16" if io else "1",
            "-k",
            "thread",
            "-q",
        ]

    def setting(self, io: bool) -> str:
        return f"-w {16 if io else 1} -k thread"

    def pusher(self, kind: str, run: str, n: int, ms: int) -> Pusher:
        tasks = _build()
        if kind == "tick":
            return lambda: tasks["tick"](run, n)
        return lambda: tasks["nap"](run, n, ms)

    def push_stamp(self, run: str, pushed_at: float) -> None:
        _build()["stamp"](run, pushed_at)

    def clear(self, settings: Settings) -> None:
        huey = _build()["huey"]
        huey.flush()
