"""Test fixtures: service probes that fail loudly, the `connection` fixture over every backend."""

from __future__ import annotations

import importlib.util
import json
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings
from django.db import connections as db_connections
from django.test.utils import setup_databases, teardown_databases
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from kinetis_queue import connections as queue_connections
from kinetis_queue.contracts import DisposableQueue, Queue
from tests import jobs
from tests.backends import BACKENDS, Backend

SERVICES = {
    "PostgreSQL": ("127.0.0.1", 5432, "make services (pg_ctlcluster --skip-systemctl-redirect <version> main start)"),
    "MariaDB": ("127.0.0.1", 3306, "make services (start-stop-daemon --start --background --exec /usr/sbin/mariadbd)"),
    "Redis": ("127.0.0.1", 6379, "make services (redis-server --daemonize yes --bind 127.0.0.1 --port 6379)"),
    "RabbitMQ": ("127.0.0.1", 5672, "make services (rabbitmq-server -detached)"),
}

# Property tests make no timing assertions: hypothesis's per-example deadline and its too-slow health check
# fail on a loaded machine or under coverage tracing (make test measures coverage), not on a defect.
hypothesis_settings.register_profile("kq-default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
hypothesis_settings.load_profile("kq-default")

#: Backend ids whose tests run on Django 5.2 LTS too (the core and SQL suite).
CORE_BACKENDS = {"sync", "sql-sqlite", "sql-postgres", "sql-mariadb"}

#: A core-only install (no redis extra) cannot import the Redis backend's own test modules.
collect_ignore_glob = [] if importlib.util.find_spec("redis") else ["specific/test_redis*.py"]


def _has_tasks_api() -> bool:
    import importlib.util

    return any(importlib.util.find_spec(name) is not None for name in ("django.tasks", "django_tasks"))


#: django.tasks exists on Django 6; on Django 5.2 only with the django-tasks backport installed.
collect_ignore = [] if _has_tasks_api() else ["test_tasks.py", "task_defs.py"]


def _probe(name: str) -> None:
    host, port, how = SERVICES[name]
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as exc:
        pytest.fail(f"{name} is not reachable at {host}:{port} ({exc}); start it with: {how}", pytrace=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        backend = callspec.params.get("connection") if callspec is not None else None
        if not isinstance(backend, Backend) or backend.id in CORE_BACKENDS:
            item.add_marker(pytest.mark.core)


@pytest.fixture(scope="session")
def django_db_setup(
    request: pytest.FixtureRequest, django_test_environment: None, django_db_blocker: Any
) -> Iterator[None]:
    """Create every alias's test database once; isolation comes from unique queue names, not flushes."""
    for name in SERVICES:
        _probe(name)
    with django_db_blocker.unblock():
        config = setup_databases(verbosity=0, interactive=False, aliases=set(settings.DATABASES))
    yield
    with django_db_blocker.unblock():
        queue_connections.queues.dispose_all()
        db_connections.close_all()
        teardown_databases(config, verbosity=0)
    _delete_redis_test_keys()


def _delete_redis_test_keys() -> None:
    """Delete what this run left on the shared Redis under its key prefix (tests/settings.py REDIS_PREFIX)."""
    try:
        import redis
    except ImportError:  # a core-only install: no redis test ran
        return
    client = redis.Redis.from_url(settings.REDIS_URL)
    try:
        left = list(client.scan_iter(match=f"{settings.REDIS_PREFIX}*", count=1000))
        if left:
            client.delete(*left)
    finally:
        client.close()


@pytest.fixture(autouse=True)
def _db(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    with django_db_blocker.unblock():
        yield


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    jobs.CALLS.clear()


@pytest.fixture
def queue_name() -> str:
    """A queue name no other test uses."""
    return "q" + uuid.uuid4().hex[:20]


@pytest.fixture(params=BACKENDS, ids=lambda b: b.id)
def connection(request: pytest.FixtureRequest) -> Iterator[Queue]:
    """A queue built from a real KINETIS_QUEUE entry, one per backend; skips state the spec trait."""
    backend: Backend = request.param
    for marker in request.node.iter_markers("trait"):
        missing = [name for name in marker.args if not getattr(backend, name)]
        if missing:
            pytest.skip(f"{backend.id}: spec says no {', '.join(missing)}")
    support = request.getfixturevalue(backend.setup) if backend.setup is not None else None
    queue = queue_connections.build(backend.connection)
    try:
        for marker in request.node.iter_markers("requires"):
            for capability in marker.args:
                if not isinstance(queue, capability):
                    pytest.skip(f"{backend.id} is not a {capability.__name__}")
        if support is not None:
            support.prepare(queue)
            BACKEND_SUPPORT[backend.id] = support
        yield queue
    finally:
        BACKEND_SUPPORT.pop(backend.id, None)
        if isinstance(queue, DisposableQueue):
            queue.dispose()


#: The running test's Backend.setup fixture value, by backend id (see rewrite_stored_job).
BACKEND_SUPPORT: dict[str, Any] = {}


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """moto's SQS server, once per session, on a free loopback port (tests/sqs_server.py).

    Dummy credentials and missing AWS config files keep any developer's AWS setup out; the endpoint
    reaches this process through the sqs connection's settings and worker subprocesses through
    KINETIS_TESTS_SQS_ENDPOINT (tests/settings.py).
    """
    from django.test import override_settings

    from tests.sqs_server import CLEARED_VARIABLES, ENDPOINT_VARIABLE, MotoServer, environment

    with pytest.MonkeyPatch.context() as env:
        for name in CLEARED_VARIABLES:
            env.delenv(name, raising=False)
        for name, value in environment(tmp_path_factory.mktemp("aws")).items():
            env.setenv(name, value)
        with MotoServer.running() as server:
            env.setenv(ENDPOINT_VARIABLE, server.endpoint)
            setting = settings.KINETIS_QUEUE
            sqs = {**setting["CONNECTIONS"]["sqs"], "ENDPOINT_URL": server.endpoint}
            with override_settings(KINETIS_QUEUE={**setting, "CONNECTIONS": {**setting["CONNECTIONS"], "sqs": sqs}}):
                yield server


@pytest.fixture
def sqs_queues(moto_server: Any, queue_name: str) -> Any:
    """The sqs backend's setup: creates, on moto's server, each queue this test names after queue_name."""
    from tests.sqs_server import SqsTestQueues

    return SqsTestQueues(moto_server, queue_name)


@pytest.fixture
def rabbitmq_queues() -> Iterator[Any]:
    """The rabbitmq backend's setup: afterwards, deletes every queue the test's queue declared, with its
    delay ladder (22 queues and exchanges per queue), so the shared broker accumulates nothing."""
    support = RabbitMqTestQueues()
    yield support
    support.delete_all()


class RabbitMqTestQueues:
    """What the conformance suite needs to reach around a RabbitMqQueue (tests only)."""

    def __init__(self) -> None:
        self.queues: list[Any] = []

    def prepare(self, queue: Any) -> None:
        self.queues.append(queue)

    def rewrite_stored_job(self, job_id: str, job_class: str, args: dict[str, Any]) -> None:
        """AMQP cannot edit a queued message: take it, push the rewritten copy, ack the original."""
        from dataclasses import replace

        from kinetis_queue.contracts import PreparedPush
        from kinetis_queue.envelope import new_envelope

        for queue in self.queues:
            for name in sorted(queue.declared):
                job = queue.pop(0.01, [name])
                if job is None:
                    continue
                assert job.id == job_id, f"expected job {job_id} first on {name}, found {job.id}"
                envelope = new_envelope(job_class, args, job.max_attempts, job.metadata)
                queue.send(PreparedPush(replace(envelope, id=job.id, pushed_at=job.pushed_at.timestamp()), 0, name))
                queue.ack(job)
                return
        raise AssertionError(f"job {job_id} is not waiting on any queue the test declared")

    def delete_all(self) -> None:
        for queue in self.queues:
            for name in queue.declared:
                queue.delete(name)
            queue.dispose()


@pytest.fixture
def backend(connection: Queue, request: pytest.FixtureRequest) -> Backend:
    """The Backend row of the current `connection` parameter."""
    return request.node.callspec.params["connection"]  # type: ignore[no-any-return]


def wait_until(predicate: Callable[[], Any], timeout: float = 30, interval: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def steal_reservation(backend: Backend, job_id: str) -> None:
    """Make the current delivery of ``job_id`` stale, as a reclaim by another worker would."""
    if backend.database is not None:
        with db_connections[backend.database].cursor() as cursor:
            cursor.execute(
                "UPDATE kinetis_queue_jobs SET reserved_token = %s WHERE job_id = %s", ["f" * 32, job_id]
            )
        return
    if backend.id == "redis":
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
    raise NotImplementedError(f"tests/conftest.py: add how to steal a reservation on {backend.id}")


def rewrite_stored_job(backend: Backend, job_id: str, job_class: str, args: dict[str, Any]) -> None:
    """Replace a waiting job's stored class and args through its backend's setup fixture (Backend.setup)."""
    support = BACKEND_SUPPORT.get(backend.id)
    if support is None:
        raise NotImplementedError(f"tests/conftest.py: add how to rewrite a stored job on {backend.id}")
    support.rewrite_stored_job(job_id, job_class, args)


def redis_client(backend: Backend) -> Any:
    """A plain redis-py client on the Redis server of ``backend``'s connection (tests only)."""
    import redis

    from kinetis_queue import conf

    return redis.Redis.from_url(conf.connection_settings(backend.connection).options["URL"])


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


@pytest.fixture
def outcomes() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Every outcome signal sent during the test, as (signal name, kwargs)."""
    from kinetis_queue import signals

    seen: list[tuple[str, dict[str, Any]]] = []
    receivers = []
    for name in ("job_succeeded", "job_released", "job_failed_permanently", "job_settlement_lost"):
        def receiver(sender: Any, _name: str = name, **kwargs: Any) -> None:
            kwargs.pop("signal", None)
            seen.append((_name, kwargs))

        getattr(signals, name).connect(receiver, weak=False)
        receivers.append((name, receiver))
    yield seen
    for name, receiver in receivers:
        getattr(signals, name).disconnect(receiver)
