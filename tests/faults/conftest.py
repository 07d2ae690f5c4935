"""The fault tier's fixtures: the seed, the history directory, the store adapter; soak tests opt-in only.

``@pytest.mark.soak`` tests run only under ``-m soak`` or ``KQ_SOAK=1`` (``make soak``); every other
test here is ``@pytest.mark.fault`` and runs in ``make test``. The fault tier runs on the Django
version of the main venv only: it tests the backends' promises, not Django's API, so it is not
part of the Django 5.2 ``-m core`` pass.
"""

from __future__ import annotations

import dataclasses
import os
import random
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from kinetis_queue import conf
from kinetis_queue.contracts import DisposableQueue, Queue
from tests.faults import history, stores
from tests.faults.servers import PrivateRedis
from tests.faults.worker import install_observers
from tests.support.backends import Backend

HERE = Path(__file__).resolve().parent

settings.register_profile(
    "kq-ci",
    derandomize=True,
    max_examples=50,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def soak_seconds(default: float = 1800) -> float:
    """The soak tier's run length per scenario and backend (KQ_SOAK_SECONDS, default 30 minutes)."""
    return float(os.environ.get("KQ_SOAK_SECONDS", default))


def soak_scale() -> float:
    """Fraction of the full soak size to run: 1 at 30 minutes or more (a short soak run scales down)."""
    return min(1.0, soak_seconds() / 1800)


settings.register_profile(
    "kq-soak",
    max_examples=max(50, int(1000 * soak_scale())),
    stateful_step_count=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def soak_enabled(config: pytest.Config) -> bool:
    expression = config.getoption("markexpr", "") or ""
    return os.environ.get("KQ_SOAK") == "1" or ("soak" in expression and "not soak" not in expression)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_soak = pytest.mark.skip(reason="soak tier: run with `make soak` (-m soak or KQ_SOAK=1)")
    run_soak = soak_enabled(config)
    ours = [item for item in items if HERE in Path(str(item.path)).parents]
    if "core" in (config.getoption("markexpr", "") or ""):
        # tests/conftest.py marks every test without an SQL-or-sync `connection` param as core; this
        # hook runs after the -m filter, so the fault tier leaves the Django 5.2 pass here.
        items[:] = [item for item in items if item not in ours]
        config.hook.pytest_deselected(items=ours)
        return
    for item in ours:
        if item.get_closest_marker("soak") is not None and not run_soak:
            item.add_marker(skip_soak)
        row = _row(item)
        if row is not None and not row.full_fault_tier and Path(str(item.path)).name != "test_kill_storm.py":
            item.add_marker(pytest.mark.skip(reason=f"{row.id}: the fault tier runs its kill storm only (Backend)"))


def _row(item: pytest.Item) -> Backend | None:
    """The backend row a fault test is parametrized with (as ``connection`` or ``backend``), if any."""
    params = getattr(item, "callspec", None)
    for name in ("connection", "backend"):
        value = params.params.get(name) if params is not None else None
        if isinstance(value, Backend):
            return value
    return None


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """The run's seed: KQ_SEED replays a run; printed so that a failure can be replayed."""
    value = int(os.environ.get("KQ_SEED") or random.SystemRandom().randrange(2**32))
    print(f"\n[faults] {request.node.nodeid}: KQ_SEED={value}")
    request.node.user_properties.append(("KQ_SEED", value))
    return value


@pytest.fixture
def rng(seed: int) -> random.Random:
    return random.Random(seed)


@pytest.fixture
def run_id() -> str:
    """A prefix making every job tag of this test unique."""
    return uuid.uuid4().hex[:12]


@pytest.fixture
def history_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This test's history directory, for this process (role ``test``) and every worker it starts."""
    directory = tmp_path / "history"
    directory.mkdir()
    monkeypatch.setenv(history.ENV, str(directory))
    monkeypatch.setenv("KQ_HISTORY_ROLE", "test")
    disconnect = install_observers()
    try:
        yield directory
    finally:
        disconnect()
        recorder = history.current()
        if recorder is not None:
            recorder.close()


def _close(adapter: object) -> None:
    close = getattr(adapter, "close", None)
    if close is not None:
        close()


@pytest.fixture
def store(backend: Backend, connection: Queue) -> Iterator[stores.Store]:
    """The adapter of the backend's store; skips a backend the fault tier has none for yet."""
    adapter = stores.store_for(backend, connection)
    if adapter is None:
        pytest.skip(f"{backend.id}: no store adapter in tests/faults/stores.py yet")
    yield adapter
    _close(adapter)


@pytest.fixture
def maybe_store(backend: Backend, connection: Queue) -> Iterator[stores.Store | None]:
    """The store adapter when there is one: scenarios that can run without it check the history instead."""
    adapter = stores.store_for(backend, connection)
    yield adapter
    _close(adapter)


@pytest.fixture
def long_lease(backend: Backend, connection: Queue) -> Iterator[Queue]:
    """The backend's queue with a one-hour visibility timeout: a reservation expires only when a test says so."""
    settings_ = dataclasses.replace(conf.connection_settings(backend.connection), visibility_timeout=3600)
    queue = type(connection).from_settings(settings_)
    try:
        yield queue
    finally:
        if isinstance(queue, DisposableQueue):
            queue.dispose()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A private redis-server with AOF always, for the tests that kill or pause it."""
    directory = tmp_path / "redis"
    directory.mkdir()
    server = PrivateRedis(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()
