"""Test fixtures: service probes that fail loudly, the `connection` fixture over every backend."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings
from django.db import connections as db_connections
from django.test.utils import setup_databases, teardown_databases

from kinetis_queue import connections as queue_connections
from kinetis_queue.contracts import DisposableQueue, Queue
from tests import jobs
from tests.backends import BACKENDS, Backend

SERVICES = {
    "PostgreSQL": ("127.0.0.1", 5432, "make services (pg_ctlcluster --skip-systemctl-redirect <version> main start)"),
    "MariaDB": ("127.0.0.1", 3306, "make services (start-stop-daemon --start --background --exec /usr/sbin/mariadbd)"),
}

#: Backend ids whose tests run on Django 5.2 LTS too (the core and SQL suite).
CORE_BACKENDS = {"sync", "sql-sqlite", "sql-postgres", "sql-mariadb"}


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
    queue = queue_connections.build(backend.connection)
    try:
        for marker in request.node.iter_markers("requires"):
            for capability in marker.args:
                if not isinstance(queue, capability):
                    pytest.skip(f"{backend.id} is not a {capability.__name__}")
        yield queue
    finally:
        if isinstance(queue, DisposableQueue):
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
    raise NotImplementedError(f"tests/conftest.py: add how to steal a reservation on {backend.id}")


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
