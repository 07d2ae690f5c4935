"""Helpers the tests share: waiting for a condition, another thread's transaction, a statement's moment, and
reaching into a backend's stored jobs."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn

from django.db import connections as db_connections

from tests.support.backends import Backend
from tests.support.fixtures import BACKEND_SUPPORT

if TYPE_CHECKING:
    from kinetis_queue.contracts import Queue
    from kinetis_queue.outcomes import JobReport

#: The longest pause between two polls of wait_until(): a wait of seconds (a worker subprocess, a lease) polls 10
#: times a second, not 50, where each poll reads a store or a file on a machine the suite keeps busy.
MAX_POLL_INTERVAL = 0.1


def wait_until(predicate: Callable[[], Any], timeout: float = 30, interval: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds.

    The pause starts at ``interval`` and doubles up to MAX_POLL_INTERVAL (or ``interval``, if longer).
    """
    deadline = time.monotonic() + timeout
    pause, longest = interval, max(interval, MAX_POLL_INTERVAL)
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(pause)
        pause = min(pause * 2, longest)


def in_thread(work: Callable[[], Any]) -> threading.Thread:
    """Run ``work`` in a thread of its own (so on Django connections of its own, closed after); join() re-raises."""
    failure: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:
            failure.append(exc)
        finally:
            db_connections.close_all()

    class Joined(threading.Thread):
        def join(self, timeout: float | None = 30) -> None:
            super().join(timeout)
            assert not self.is_alive(), "the thread did not end"
            if failure:
                raise failure[0]

    thread = Joined(target=run, daemon=True)
    thread.start()
    return thread


def before_first(sql_start: str, action: Callable[[], None], calls: list[str]) -> Callable[..., Any]:
    """An execute wrapper (Django's connection.execute_wrapper): runs ``action`` once, just before the first
    statement starting with ``sql_start``; ``calls`` records every such statement."""

    def wrapper(execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        if sql.startswith(sql_start):
            calls.append(sql)
            if len(calls) == 1:
                action()
        return execute(sql, params, many, context)

    return wrapper


def steal_reservation(backend: Backend, job_id: str) -> None:
    """Make the current delivery of ``job_id`` stale, as a reclaim by another worker would."""
    if backend.database is not None:
        with db_connections[backend.database].cursor() as cursor:
            cursor.execute("UPDATE kinetis_queue_jobs SET reserved_token = %s WHERE job_id = %s", ["f" * 32, job_id])
        return
    if backend.id in ("redis", "redis-cluster"):
        # A reclaim swaps the leased envelope for one with attempts + 1: the old handle matches nothing.
        key, member = find_redis_member(backend, job_id, "leased")
        stolen = json.loads(member)
        stolen["attempts"] += 1
        with redis_client(backend) as client:
            client.zadd(key, {json.dumps(stolen, separators=(",", ":")): float(client.zscore(key, member) or 0)})
            client.zrem(key, member)
        return
    if backend.id == "sqs":
        # Spec, "Fenced settlements": SQS has no fence, so nothing could observe the steal, and the tests
        # that steal are trait("fenced"). A steal is not even possible from here: it needs the current
        # ReceiptHandle, which only the worker holds, while the worker's heartbeat keeps the message hidden.
        raise NotImplementedError("sqs is unfenced (spec: Fenced settlements); no test steals a reservation there")
    if backend.id == "rabbitmq":
        # Spec, "Fenced settlements": none on RabbitMQ (a delivery tag is scoped to its channel), so the tests
        # that steal are trait("fenced"). Its one way to lose a delivery, a dropped connection, is covered in
        # tests/specific/test_rabbitmq.py.
        raise NotImplementedError("rabbitmq is unfenced (spec: Fenced settlements); no test steals a reservation")
    raise NotImplementedError(f"tests/support/helpers.py: add how to steal a reservation on {backend.id}")


def rewrite_stored_job(backend: Backend, job_id: str, job_class: str, args: dict[str, Any]) -> None:
    """Replace a waiting job's stored class and args through its backend's setup fixture (Backend.setup)."""
    support = BACKEND_SUPPORT.get(backend.id)
    if support is None:
        raise NotImplementedError(f"tests/support/helpers.py: add how to rewrite a stored job on {backend.id}")
    support.rewrite_stored_job(job_id, job_class, args)


def redis_client(backend: Backend) -> Any:
    """A plain redis-py client on the Redis server of ``backend``'s connection (tests only)."""
    import redis

    from kinetis_queue import conf

    options = conf.connection_settings(backend.connection).options
    if options["CLUSTER_NODES"]:
        return redis.RedisCluster.from_url(options["CLUSTER_NODES"][0])
    return redis.Redis.from_url(options["URL"])


def find_redis_member(backend: Backend, job_id: str, kind: str) -> tuple[str, bytes]:
    """The ``pending`` or ``leased`` key and stored envelope of ``job_id`` on the redis test connection.

    Scans the connection's key prefix (a test may use SCAN; the backend never lists keys).
    """
    from kinetis_queue import conf

    prefix = conf.connection_settings(backend.connection).options["PREFIX"]
    with redis_client(backend) as client:
        for key in client.scan_iter(match=f"{prefix}kinetis_queue:*:{kind}", count=1000):
            members = client.lrange(key, 0, -1) if kind == "pending" else client.zrange(key, 0, -1)
            for member in members:
                if f'"id":"{job_id}"'.encode() in member:
                    return key.decode(), member
    raise AssertionError(f"job {job_id} is not in any {kind} key under {prefix!r}")


def connections_only(*names: str, **top: Any) -> Any:
    """``override_settings`` of KINETIS_QUEUE keeping only the connections ``names`` (the default one, sqlite,
    always) and setting ``top``'s keys.

    For a test of a view that reads every connection's every queue (the metrics' depths, the status page) while
    asserting on its own: the suite's twenty-odd connections share six stores that hold every earlier test's
    queues by then, and reading them all took a metrics test 40 s late in a run against 2 s at its start.
    """
    from django.conf import settings
    from django.test import override_settings

    setting = settings.KINETIS_QUEUE
    kept = {"sqlite", *names}
    connections = {name: entry for name, entry in setting["CONNECTIONS"].items() if name in kept}
    return override_settings(KINETIS_QUEUE={**setting, "CONNECTIONS": connections, **top})


def exit_forked_child(code: int) -> NoReturn:
    """End a child a test forked, at once and running nothing of the parent's: ``posix._exit``, not ``os._exit``.

    Under ``make test`` coverage patches ``os._exit`` (pyproject.toml, ``patch = ["_exit"]``) to save its data
    first, and a child forked from the multi-threaded test process may inherit a lock another thread held at
    the fork: the child then never exits (test_a_forked_child_starts_empty_under_a_source_of_its_own hung in
    ``waitpid`` until its 120 s timeout). The child measures nothing (the fork tests mark it ``no cover``).
    """
    import posix

    posix._exit(code)


def process_deliveries(connection: Queue, queue_name: str, deliveries: int) -> list[JobReport]:
    """Run ``deliveries`` deliveries of ``queue_name`` on a fresh Worker (each must come within 10 s); their reports."""
    from kinetis_queue.worker import Worker

    reports: list[JobReport] = []
    worker = Worker(connection, recorder=None, reporter=reports.append)
    try:
        for _ in range(deliveries):
            assert worker.process_next(10, [queue_name]) is True
    finally:
        worker.close()
    return reports
