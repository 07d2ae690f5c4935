"""Celery: ``celery worker -P solo`` with acks_late and prefetch multiplier 4, on Redis or RabbitMQ.

Settings of the rows (Celery's documented choices for reliable single-process work): ``task_acks_late``
(acknowledge after the task ran: at-least-once, as the project), ``worker_prefetch_multiplier=4``
(the default), the solo pool (no child process: the prefork pool's pipe costs about 40 % here),
results ignored, and ``--without-gossip --without-mingle --without-heartbeat`` (cluster chatter that a
single worker does not need). The I/O-bound workload runs ``-P threads -c 16``. Pushes go through
``apply_async`` without publisher confirms, Celery's default. The app is built on first access of
``app`` from the BENCH_PEERS_* environment (BENCH_PEERS_BROKER picks the store).
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
        from celery import Celery

        app = Celery("bench_peers", broker=os.environ["BENCH_PEERS_BROKER"], set_as_current=True)
        app.conf.update(
            task_acks_late=True,
            worker_prefetch_multiplier=4,
            task_ignore_result=True,
            task_default_queue=os.environ["BENCH_PEERS_QUEUE"],
            broker_connection_retry_on_startup=True,
            worker_hijack_root_logger=False,
        )
        _built["app"] = app
        for fn in (probe.tick, probe.nap, probe.stamp):
            _built[fn.__name__] = app.task(fn, name=f"bench.{fn.__name__}")
    return _built


def __getattr__(name: str) -> Any:
    if name == "app":
        return _build()["app"]
    raise AttributeError(name)


class Celery(Peer):
    def __init__(self, store: str) -> None:
        self.store = store
        self.name = f"celery-{store}"
        self.label = "Celery solo, acks_late, prefetch 4"

    def env(self, settings: Settings) -> dict[str, str]:
        broker = settings.redis_url if self.store == "redis" else settings.amqp_url
        return {**super().env(settings), "BENCH_PEERS_BROKER": broker}

    def worker_argv(self, settings: Settings, io: bool) -> list[str]:
        pool = ["-P", "threads", "-c", "16"] if io else ["-P", "solo"]
        return [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "bench.peers.celery_peer:app",
            "worker",
            *pool,
            "-Q",
            self.queue(settings),
            "-l",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]

    def setting(self, io: bool) -> str:
        return "-P threads -c 16, acks_late" if io else "-P solo, acks_late, prefetch multiplier 4"

    def pusher(self, kind: str, run: str, n: int, ms: int) -> Pusher:
        tasks = _build()
        if kind == "tick":
            return lambda: tasks["tick"].apply_async((run, n))
        return lambda: tasks["nap"].apply_async((run, n, ms))

    def push_stamp(self, run: str, pushed_at: float) -> None:
        _build()["stamp"].apply_async((run, pushed_at))

    def clear(self, settings: Settings) -> None:
        app = _build()["app"]
        with app.connection_for_write() as conn:
            try:
                conn.default_channel.queue_purge(self.queue(settings))
            except Exception:  # a queue not declared yet has nothing to purge
                pass
