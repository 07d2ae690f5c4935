"""Every row the harness can measure, in table order: the project first on each store, then its peers."""

from __future__ import annotations

from bench.peers.base import Peer
from bench.peers.celery_peer import Celery
from bench.peers.django_tasks_db_peer import DjangoTasksDb
from bench.peers.dramatiq_peer import Dramatiq
from bench.peers.huey_peer import Huey
from bench.peers.kinetis import Kinetis
from bench.peers.procrastinate_peer import Procrastinate
from bench.peers.rq_peer import Rq

STORES = ("redis", "postgres", "rabbitmq")


def all_rows() -> list[Peer]:
    return [
        Kinetis("redis"),
        Dramatiq(threads=1, prefetch=64),
        Dramatiq(threads=8, prefetch=None),
        Huey(),
        Celery("redis"),
        Rq(),
        Kinetis("postgres"),
        Procrastinate(),
        DjangoTasksDb(),
        Kinetis("rabbitmq"),
        Celery("rabbitmq"),
    ]


def row(name: str) -> Peer:
    for candidate in all_rows():
        if candidate.name == name:
            return candidate
    raise SystemExit(f"bench.peers: no row named {name!r}; rows: {', '.join(r.name for r in all_rows())}")
