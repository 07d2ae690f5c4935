"""The fixtures every test folder uses (tests/conftest.py imports them so pytest finds them).

``connection`` is parametrized over every backend row of tests/support/backends.py; ``backend`` is its
row; each backend's setup fixture (``sqs_queues``, ``rabbitmq_queues``, ``pgbouncer_row``) reaches around its queue.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings

from kinetis_queue import connections as queue_connections
from kinetis_queue.contracts import DisposableQueue, Queue
from tests.support.backends import BACKENDS, Backend
from tests.support.rabbitmq_leaks import broker_used, remember

#: Seconds RabbitMqTestQueues.rewrite_stored_job() looks for the message to rewrite.
REWRITE_WAIT = 10.0


@pytest.fixture
def queue_name(request: pytest.FixtureRequest) -> str:
    """A queue name no other test uses (remembered for the session-end RabbitMQ check, rabbitmq_leaks.py)."""
    name = "q" + uuid.uuid4().hex[:20]
    remember(name, request.node.nodeid)
    return name


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


def rebuilt(request: pytest.FixtureRequest, **changes: Any) -> Queue:
    """Another queue on the running test's connection row, its settings changed by ``changes`` (the fields of
    kinetis_queue.conf.ConnectionSettings), prepared like the ``connection`` fixture's and disposed after the test.

    For a test whose bound must hold on a loaded machine: a longer lease than the suite's one second, say.
    """
    import dataclasses

    from kinetis_queue import conf

    backend: Backend = request.node.callspec.params["connection"]
    queue = queue_connections.build_from(dataclasses.replace(conf.connection_settings(backend.connection), **changes))
    support = BACKEND_SUPPORT.get(backend.id)
    if support is not None:
        support.prepare(queue)
    if isinstance(queue, DisposableQueue):
        request.addfinalizer(queue.dispose)
    return queue


@pytest.fixture(scope="session")
def moto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """moto's SQS server, once per session, on a free loopback port (tests/support/sqs_server.py).

    Dummy credentials and missing AWS config files keep any developer's AWS setup out; the endpoint
    reaches this process through the sqs connection's settings and worker subprocesses through
    KINETIS_TESTS_SQS_ENDPOINT (tests/settings.py).
    """
    from django.test import override_settings

    from tests.support.sqs_server import CLEARED_VARIABLES, ENDPOINT_VARIABLE, MotoServer, environment

    with pytest.MonkeyPatch.context() as env:
        for name in CLEARED_VARIABLES:
            env.delenv(name, raising=False)
        for name, value in environment(tmp_path_factory.mktemp("aws")).items():
            env.setenv(name, value)
        with MotoServer.running() as server:
            env.setenv(ENDPOINT_VARIABLE, server.endpoint)
            setting = settings.KINETIS_QUEUE
            connections = {
                name: {**entry, "ENDPOINT_URL": server.endpoint} if entry["BACKEND"] == "sqs" else entry
                for name, entry in setting["CONNECTIONS"].items()
            }
            with override_settings(KINETIS_QUEUE={**setting, "CONNECTIONS": connections}):
                yield server


def _pointing(kind: str, value: list[str]) -> dict[str, Any]:
    """KINETIS_QUEUE with every redis connection that has ``kind`` (CLUSTER_NODES or SENTINELS) set to ``value``."""
    setting = settings.KINETIS_QUEUE
    connections = {
        name: {**entry, kind: value} if entry["BACKEND"] == "redis" and kind in entry else entry
        for name, entry in setting["CONNECTIONS"].items()
    }
    return {**setting, "CONNECTIONS": connections}


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[Any]:
    """A local Redis Cluster (three masters, three replicas: tests/support/redis_servers.py), once per session
    (per xdist worker); the rediscluster connection points at it, in this process and in worker subprocesses."""
    from django.test import override_settings

    from tests.support.redis_servers import LocalCluster

    cluster = LocalCluster()
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("KINETIS_TESTS_REDIS_CLUSTER", ",".join(cluster.urls))
            with override_settings(KINETIS_QUEUE=_pointing("CLUSTER_NODES", cluster.urls)):
                yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def redis_sentinels() -> Iterator[Any]:
    """A local master, replica and three sentinels (tests/support/redis_servers.py), once per session; the
    redissentinel connection points at them."""
    from django.test import override_settings

    from tests.support.redis_servers import LocalSentinels

    sentinels = LocalSentinels()
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("KINETIS_TESTS_REDIS_SENTINELS", ",".join(sentinels.urls))
            with override_settings(KINETIS_QUEUE=_pointing("SENTINELS", sentinels.urls)):
                yield sentinels
    finally:
        sentinels.stop()


class RedisTopology:
    """The setup of a row on a Redis topology the tests started: nothing to prepare per test."""

    def __init__(self, servers: Any) -> None:
        self.servers = servers

    def prepare(self, queue: Any) -> None:
        pass


@pytest.fixture
def redis_cluster_row(redis_cluster: Any) -> RedisTopology:
    """The redis-cluster row's setup: the session's local cluster."""
    return RedisTopology(redis_cluster)


@pytest.fixture
def sqs_queues(moto_server: Any, queue_name: str) -> Iterator[Any]:
    """The sqs backend's setup: creates, on moto's server, each queue this test names after queue_name, and
    deletes them after the test (a server that kept every test's queues made each listing of them slower)."""
    from tests.support.sqs_server import SqsTestQueues

    queues = SqsTestQueues(moto_server, queue_name)
    yield queues
    queues.delete_all()


@pytest.fixture(scope="session")
def pgbouncer(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """PgBouncer in transaction pooling before the PostgreSQL test database, once per session (support/pgbouncer.py).

    After the test databases exist (the pgbouncer alias mirrors postgres's), and stopped before they are
    dropped, so no pooled server connection holds the database then. The alias's PORT is set here for
    this process, and through KINETIS_TESTS_PGBOUNCER_PORT for worker subprocesses (tests/settings.py).
    """
    from django.db import connections as db_connections

    from tests.support.pgbouncer import PORT_VARIABLE, PgBouncer

    upstream = settings.DATABASES["postgres"]
    alias = db_connections["pgbouncer"]
    with (
        pytest.MonkeyPatch.context() as env,
        PgBouncer.running(
            tmp_path_factory.mktemp("pgbouncer"), upstream["USER"], upstream["HOST"], int(upstream["PORT"])
        ) as server,
    ):
        env.setenv(PORT_VARIABLE, str(server.port))
        alias.close()
        env.setitem(alias.settings_dict, "PORT", str(server.port))
        env.setitem(settings.DATABASES["pgbouncer"], "PORT", str(server.port))
        try:
            yield server
        finally:
            queue_connections.queues.dispose_all()
            alias.close()


@pytest.fixture
def pgbouncer_row(pgbouncer: Any) -> Any:
    """The sql-pgbouncer row's setup: PgBouncer is running; nothing to do to a built queue."""
    return _NoSupport()


class _NoSupport:
    def prepare(self, queue: Any) -> None:
        pass


@pytest.fixture
def rabbitmq_queues(queue_name: str) -> Iterator[Any]:
    """The rabbitmq backend's setup: afterwards, deletes every queue the test's queue declared, with its
    delay ladder (22 queues and exchanges per queue), so the shared broker accumulates nothing; and the
    test's queue_name, which a worker or command the test ran as a subprocess may have declared."""
    broker_used()
    support = RabbitMqTestQueues()
    yield support
    support.delete_all(also=[queue_name])


class RabbitMqTestQueues:
    """What the conformance suite needs to reach around a RabbitMqQueue (tests only)."""

    def __init__(self) -> None:
        self.queues: list[Any] = []

    def prepare(self, queue: Any) -> None:
        self.queues.append(queue)

    def rewrite_stored_job(self, job_id: str, job_class: str, args: dict[str, Any]) -> None:
        """AMQP cannot edit a queued message: take it, push the rewritten copy, ack the original.

        The message is looked for until REWRITE_WAIT has passed: a confirmed publish may reach a consumer
        later than one short pop on a loaded machine (a quorum queue's once took longer than 10 ms)."""
        from dataclasses import replace

        from kinetis_queue.contracts import PreparedPush
        from kinetis_queue.payload.envelope import new_envelope

        deadline = time.monotonic() + REWRITE_WAIT
        while time.monotonic() < deadline:
            for queue in self.queues:
                for name in sorted(queue.declared):
                    job = queue.pop(0.05, [name])
                    if job is None:
                        continue
                    assert job.id == job_id, f"expected job {job_id} first on {name}, found {job.id}"
                    envelope = new_envelope(job_class, args, job.max_attempts, job.metadata)
                    queue.send(PreparedPush(replace(envelope, id=job.id, pushed_at=job.pushed_at.timestamp()), 0, name))
                    queue.ack(job)
                    return
        raise AssertionError(f"job {job_id} is not waiting on any queue the test declared after {REWRITE_WAIT:g}s")

    def delete_all(self, also: list[str]) -> None:
        """Delete what each prepared queue declared, and the names in ``also`` (deleting a missing queue is
        a no-op on the broker)."""
        for index, queue in enumerate(self.queues):
            for name in queue.declared | (set(also) if index == 0 else set()):
                queue.delete(name)
            queue.dispose()


@pytest.fixture
def backend(connection: Queue, request: pytest.FixtureRequest) -> Backend:
    """The Backend row of the current `connection` parameter."""
    return request.node.callspec.params["connection"]  # type: ignore[no-any-return]


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
