"""The django-tasks-db row's tasks (Django's ``@task``), on the queue named by BENCH_PEERS_QUEUE."""

from __future__ import annotations

import os

from django.tasks import task

from bench.peers import probe

QUEUE = os.environ.get("BENCH_PEERS_QUEUE", "default")


@task(queue_name=QUEUE)
def tick(run: str, n: int) -> None:
    probe.tick(run, n)


@task(queue_name=QUEUE)
def nap(run: str, n: int, ms: int) -> None:
    probe.nap(run, n, ms)


@task(queue_name=QUEUE)
def stamp(run: str, pushed_at: float) -> None:
    probe.stamp(run, pushed_at)
