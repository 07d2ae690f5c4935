"""Test set-up: service probes that fail loudly, the test databases, the core marker; the shared fixtures
(tests/support/fixtures.py) imported so that pytest finds them in every folder."""

from __future__ import annotations

import importlib.util
import os
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.db import connections as db_connections
from django.test.utils import setup_databases, teardown_databases
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings

from kinetis_queue import connections as queue_connections
from kinetis_queue.worker import Worker
from tests import jobs
from tests.support import rabbitmq_leaks, reruns, stray_logs, zygote
from tests.support.backends import EXTENDED_ROWS, Backend
from tests.support.fixtures import (  # noqa: F401  (pytest finds fixtures in conftest.py)
    backend,
    connection,
    moto_server,
    outcomes,
    pgbouncer,
    pgbouncer_row,
    queue_name,
    rabbitmq_queues,
    redis_cluster,
    redis_cluster_row,
    redis_sentinels,
    sqs_queues,
)
from tests.support.rabbitmq_leaks import _rabbitmq_shared_queues_deleted  # noqa: F401  (an autouse fixture)

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

#: Fixtures that start a Redis topology (tests/support/redis_servers.py): their tests are the Redis backend's, not
#: the core's, so the Django 5.2 run (-m core) does not start the servers a second time.
TOPOLOGY_FIXTURES = frozenset({"redis_cluster", "redis_sentinels"})

#: A core-only install (no redis extra) cannot import the Redis backend's own test modules.
collect_ignore_glob = [] if importlib.util.find_spec("redis") else ["specific/test_redis*.py"]


def _has_tasks_api() -> bool:
    import importlib.util

    return any(importlib.util.find_spec(name) is not None for name in ("django.tasks", "django_tasks"))


#: django.tasks exists on Django 6; on Django 5.2 only with the django-tasks backport installed.
collect_ignore = [] if _has_tasks_api() else ["integrations/test_tasks.py", "task_defs.py"]
#: @task(**options) reaches the backend's task_class from Django 6.1 on (not every backport forwards them).
if importlib.util.find_spec("django.tasks") is None:
    collect_ignore += [
        "task_option_defs.py",
        "integrations/test_tasks_options.py",
        "integrations/test_tasks_signals.py",
        "integrations/test_tasks_results.py",
    ]


def pytest_configure(config: pytest.Config) -> None:
    """The hygiene checks (issue 28), as plugins of their own.

    tests/support/stray_logs.py: a log record at ERROR or above fails the test running when it arrives (a
    late one from a thread an earlier test left running included), unless the test takes ``caplog``, is
    marked ``@pytest.mark.logs_errors("logger.name", ...)`` naming the loggers it provokes on purpose, or
    provokes it inside ``with expected_errors("logger.name"):`` (for fixtures). Fix the source (stop the
    worker or loop the test started) rather than exempting a test.
    tests/support/rabbitmq_leaks.py: a RabbitMQ queue a test declared and left fails the test (declared in
    this process) or the run (declared by a subprocess, under a queue_name of this session).

    tests/support/reruns.py: a test that failed and passed on its rerun (RERUNS) has its first failure printed
    in the summary ("what the reruns hid").

    tests/support/zygote.py: the Python subprocesses the tests start are forked from a process that has
    imported Django and the drivers once (``KQ_TESTS_ZYGOTE=0`` starts each as a new interpreter).
    """
    zygote.install()
    for plugin in (stray_logs, rabbitmq_leaks, reruns):
        if not config.pluginmanager.is_registered(plugin):
            config.pluginmanager.register(plugin, f"kq-{plugin.__name__.rsplit('.', 1)[-1]}")


def _probe(name: str) -> None:
    host, port, how = SERVICES[name]
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as exc:
        pytest.fail(f"{name} is not reachable at {host}:{port} ({exc}); start it with: {how}", pytrace=False)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the xdist_group marks added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    storms = os.environ.get("KQ_STORMS") == "1" or "storm" in (config.getoption("markexpr", "") or "").replace(
        "not storm", ""
    )
    skip_storm = pytest.mark.skip(reason="a long multi-process storm: run with `make storms` (-m storm or KQ_STORMS=1)")
    kept: list[pytest.Item] = []
    deselected: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        row = callspec.params.get("connection") if callspec is not None else None
        starts_servers = not TOPOLOGY_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))
        own_django = "packaging" in item.path.parts  # a venv of its own: the running Django plays no part
        if (not isinstance(row, Backend) or row.id in CORE_BACKENDS) and not starts_servers and not own_django:
            item.add_marker(pytest.mark.core)
        rows = [value for value in callspec.params.values() if isinstance(value, Backend)] if callspec else []
        if any(not each.fault_tier for each in rows) and "faults" in item.path.parts:
            deselected.append(item)
            continue
        if any(each.id in EXTENDED_ROWS for each in rows) and not _row_suite(item):
            deselected.append(item)
            continue
        kept.append(item)
        if item.get_closest_marker("storm") is not None and not storms:
            item.add_marker(skip_storm)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
    for item in kept:
        if _module_scoped(item):
            item.add_marker(pytest.mark.xdist_group(item.path.relative_to(config.rootpath).as_posix()))
    items[:] = _spread(kept)


#: Tiers whose tests are long multi-process scenarios or builds (tens of seconds each, most of their CPU in
#: subprocesses): handed out early and spread out (see _spread).
HEAVY_TIERS = frozenset({"faults", "packaging", "bench"})


def _row_suite(item: pytest.Item) -> bool:
    """Whether the test is of what an extended row runs (tests/support/backends.py EXTENDED_ROWS): the
    conformance suite, the kill storm and the rate limits' kill storm (issue 30: its bound on every row)."""
    return "conformance" in item.path.parts or item.path.name in ("test_kill_storm.py", "test_rate_limits.py")


def _module_scoped(item: pytest.Item) -> bool:
    """Whether the test uses a module-scoped fixture (a wheel build, a browser, a live server): its module's tests
    then go to one xdist process together (``--dist loadgroup``), which builds the fixture once."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs and defs[-1].scope == "module" for defs in info.name2fixturedefs.values())


def _heavy(item: pytest.Item) -> bool:
    return not HEAVY_TIERS.isdisjoint(item.path.parts) or item.get_closest_marker("xdist_group") is not None


def _spread(items: list[pytest.Item]) -> list[pytest.Item]:
    """The heavy tests spread evenly over the first two thirds of the others, in collection order otherwise.

    pytest-xdist (``--dist loadgroup --no-loadscope-reorder``, the Makefile) hands the tests out one unit at a
    time in this order. Left last, the fault tier's scenarios of up to a minute each ran on one or two
    processes while the others stood idle; all first, they ran four at once on two cores; spread out, each
    process runs about one at a time beside light tests, and none is left for the end.
    """
    heavy = [item for item in items if _heavy(item)]
    light = [item for item in items if not _heavy(item)]
    if not heavy:
        return light
    step = max(1.0, len(light) * 2 / 3 / len(heavy))
    ordered: list[pytest.Item] = []
    taken = 0
    for index, item in enumerate(light):
        while taken < len(heavy) and taken * step <= index:
            ordered.append(heavy[taken])
            taken += 1
        ordered.append(item)
    ordered.extend(heavy[taken:])
    return ordered


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


@pytest.fixture(scope="session", autouse=True)
def _pgbouncer_running(request: pytest.FixtureRequest) -> None:
    """PgBouncer runs for the whole session: besides the sql-pgbouncer row, what walks every database alias
    (queue_prune, the checks) reaches the pgbouncer alias too (tests/support/pgbouncer.py; about 0.1 s).
    Without the pgbouncer binary only the tests that need it fail, naming scripts/system-deps.sh."""
    from tests.support.pgbouncer import binary

    try:
        binary()
    except RuntimeError:
        return
    request.getfixturevalue("pgbouncer")


@pytest.fixture(autouse=True)
def _db(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    with django_db_blocker.unblock():
        yield


@pytest.fixture(autouse=True)
def _workers_closed(_db: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every Worker a test makes is closed after it, while the test may still use the database (issue 27
    item 18): a worker left open would refresh its hooks in the background into the next test."""
    made: list[Worker] = []
    init = Worker.__init__

    def recorded(self: Worker, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self)  # once built: a refused one has nothing to close

    monkeypatch.setattr(Worker, "__init__", recorded)
    yield
    for worker in made:
        worker.close()


@pytest.fixture(autouse=True)
def _history_writer_stopped(_db: None) -> Iterator[None]:
    """The history's writer thread a test started is stopped after it, while the database is still open
    (issue 28): a test that overrides KINETIS_QUEUE without HISTORY (on by default) and pushes starts it,
    and switching HISTORY off does not stop it, so it flushed every few seconds into later tests, logging
    "The worker's history failed: ... Database access not allowed" into whichever one was running."""
    yield
    if any(thread.name == "kinetis-queue-history" and thread.is_alive() for thread in threading.enumerate()):
        from kinetis_queue.observability.history import WRITER

        WRITER.stop()


@pytest.fixture(autouse=True)
def _clear_calls() -> None:
    jobs.CALLS.clear()
