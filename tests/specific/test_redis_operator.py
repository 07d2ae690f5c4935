"""Redis on the operator's side: queue_status figures at the edges, queue names by SCAN, the restart marker.

The figures test for every backend is in tests/operator/test_status.py; here is what only Redis
has: a due delayed job counted as ready, the SCAN over the key prefix, and the restart generation
kept on the Redis server, read by a real worker process.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from django.core.management import call_command

from kinetis_queue import conf, queues
from kinetis_queue.backends.redis import RedisQueue
from kinetis_queue.backends.redis.restart import RedisRestartMarker
from kinetis_queue.worker.restart import DatabaseRestartMarker, marker_for
from tests import jobs, operator_jobs
from tests.settings import REDIS_PREFIX, REDIS_URL
from tests.specific.test_worker_limits import Running
from tests.support.helpers import wait_until


@pytest.fixture
def server() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL)
    yield client
    client.close()


@pytest.fixture
def prefix(server: redis.Redis) -> Iterator[str]:
    """A key prefix of this test's own, under the run's prefix; its keys are deleted afterwards."""
    value = f"{REDIS_PREFIX}{uuid.uuid4().hex[:12]}:"
    yield value
    stale = list(server.scan_iter(match=f"{value}*", count=1000))
    if stale:
        server.delete(*stale)


@pytest.fixture
def built() -> Iterator[list[RedisQueue]]:
    made: list[RedisQueue] = []
    yield made
    for queue in made:
        queue.dispose()


def make(built: list[RedisQueue], prefix: str, connection: str | None = None) -> RedisQueue:
    queue = RedisQueue(url=REDIS_URL, prefix=prefix, visibility_timeout=30, connection=connection)
    built.append(queue)
    return queue


def test_a_delayed_job_counts_as_ready_once_due(built: list[RedisQueue], prefix: str) -> None:
    """The next sweep promotes a due delayed job, so it is ready before anything moved it."""
    queue = make(built, prefix)
    queue.push(jobs.Noop(), queue="q", delay=0.3)
    first = queue.stats("q")
    assert (first.ready, first.delayed, first.reserved, first.approximate) == (0, 1, 0, False)
    due = wait_until(lambda: (s := queue.stats("q")).ready == 1 and s, timeout=10)
    assert (due.delayed, due.reserved, due.waiting) == (0, 0, queue.size("q"))


def test_queue_names_lists_the_queues_under_the_prefix_only(built: list[RedisQueue], prefix: str) -> None:
    """Pending, delayed and leased keys each name a queue; a prefix's glob characters are matched literally."""
    globbing = f"{prefix}P[ab]*:"
    queue = make(built, globbing, connection="fast")
    queue.push(jobs.Noop(), queue="waiting")
    queue.push(jobs.Noop(), queue="later", delay=600)
    queue.push(jobs.Noop(), queue="held")
    assert queue.pop(1, ["held"]) is not None
    queue.restart_marker().bump()
    # Unescaped, the pattern P[ab]*: would match this sibling prefix's keys.
    make(built, f"{prefix}Pa:").push(jobs.Noop(), queue="theirs")
    assert queue.queue_names() == ["held", "later", "waiting"]
    assert make(built, f"{prefix}empty:").queue_names() == []


def test_the_restart_marker_is_a_key_on_the_connections_server(
    built: list[RedisQueue], prefix: str, server: redis.Redis
) -> None:
    queue = make(built, prefix, connection="fast")
    marker = marker_for(queue, "fast")
    assert isinstance(marker, RedisRestartMarker)
    database_generation = DatabaseRestartMarker("fast").read()
    assert marker.read() == 0
    assert (marker.bump(), marker.bump()) == (1, 2)
    assert server.get(f"{prefix}kinetis_queue:restart:fast:generation") == b"2"
    # What a worker on another host reads: the same key through a queue of its own.
    assert make(built, prefix, connection="fast").restart_marker().read() == 2
    assert make(built, prefix, connection="other").restart_marker().read() == 0
    assert DatabaseRestartMarker("fast").read() == database_generation


@pytest.fixture
def running() -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for worker in started:
        worker.kill()


def test_queue_restart_stops_a_worker_of_the_redis_connection(
    queue_name: str, tmp_path: Path, running: list[Running], server: redis.Redis
) -> None:
    """queue_restart INCRs the connection's key and leaves the database alone; the worker exits "restart"."""
    key = f"{conf.connection_settings('redis').options['PREFIX']}kinetis_queue:restart:redis:generation"
    ran = tmp_path / "ran"
    queues["redis"].push(operator_jobs.Touches(str(ran)), queue=queue_name)
    worker = Running("--connection=redis", f"--queue={queue_name}", "--sleep=0.5")
    running.append(worker)
    wait_until(ran.exists, timeout=60)  # the worker has read its generation
    before, database_generation = int(server.get(key) or 0), DatabaseRestartMarker("redis").read()
    out = io.StringIO()
    call_command("queue_restart", "--connection=redis", stdout=out)
    after = int(server.get(key) or 0)
    assert after > before and f"connection 'redis' (generation {after})" in out.getvalue()
    assert DatabaseRestartMarker("redis").read() == database_generation
    assert worker.wait() == 0
    assert worker.saw("Worker stopped (restart) after 1 job(s)."), worker.lines
