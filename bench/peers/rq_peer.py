"""RQ: ``rq worker -w rq.worker.SimpleWorker`` (runs jobs in the worker process; the default worker forks per job).

RQ has no threads in a worker, so the I/O-bound row runs the same one-at-a-time worker (said in the
table). Jobs are the probe functions themselves, enqueued by import path; results keep RQ's default TTL.
"""

from __future__ import annotations

from bench.peers import probe
from bench.peers.base import Peer, Pusher, Settings, bin_path


class Rq(Peer):
    name = "rq"
    label = "RQ SimpleWorker"
    store = "redis"
    io_note = "no threads in an RQ worker: one job at a time"

    def worker_argv(self, settings: Settings, io: bool) -> list[str]:
        return [
            bin_path("rq"),
            "worker",
            "-w",
            "rq.worker.SimpleWorker",
            "--url",
            settings.redis_url,
            "-q",
            self.queue(settings),
        ]

    def setting(self, io: bool) -> str:
        return "SimpleWorker (one job at a time)"

    def client_setup(self, settings: Settings) -> None:
        import redis
        import rq

        self.rq_queue = rq.Queue(self.queue(settings), connection=redis.Redis.from_url(settings.redis_url))

    def pusher(self, kind: str, run: str, n: int, ms: int) -> Pusher:
        if kind == "tick":
            return lambda: self.rq_queue.enqueue(probe.tick, run, n)
        return lambda: self.rq_queue.enqueue(probe.nap, run, n, ms)

    def push_stamp(self, run: str, pushed_at: float) -> None:
        self.rq_queue.enqueue(probe.stamp, run, pushed_at)

    def clear(self, settings: Settings) -> None:
        self.client_setup(settings)
        self.rq_queue.empty()
