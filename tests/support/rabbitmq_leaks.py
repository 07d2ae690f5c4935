"""RabbitMQ hygiene check (issue 28): a test deletes every queue it declared on the shared broker.

Two checks, neither calling the broker per test:

- In the test process, every queue a RabbitMqQueue declares is charged to the running test, and every
  ``RabbitMqQueue.delete()`` discharges it. A test whose teardown ends with a queue still charged fails
  (no broker call: the bookkeeping is this process's own). This covers fixed names such as ``default``,
  which other runs on the broker share and a listing could not attribute.
- Queues declared elsewhere (a worker subprocess, a raw channel) are caught once per session: every name
  the ``queue_name`` fixture handed out (``q`` + 20 hex digits, unique to this session) is remembered with
  its test, and at session end (on the xdist controller, after every worker) one ``rabbitmqctl
  list_queues`` call lists the broker's queues; one that carries such a name (``<name>``,
  ``<name>-high``, ``<name>.delay.<N>s`` ...) fails the run, naming the test. A session that never
  reached RabbitMQ (a core-only run) skips the listing.

What a test declared through a connection built from KINETIS_QUEUE (``queues[...]``, which views, commands
and hooks use: a status page's size() declares every queue it lists) is deleted
after the test by an autouse fixture (``_rabbitmq_shared_queues_deleted``); what it declared on a
RabbitMqQueue it built itself, or through a subprocess, is its own (or its fixture's) to delete.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
from collections.abc import Generator, Iterator
from typing import Any

import pytest

#: The names the queue_name fixture makes (tests/support/fixtures.py): unique to this session.
UNIQUE_NAME = re.compile(r"q[0-9a-f]{20}")
#: The key under which an xdist worker hands its names to the controller (config.workeroutput).
WORKER_OUTPUT = "kq_rabbitmq_names"


class _Ledger:
    """Queues declared in this process and not deleted since, by test; the session's unique names."""

    def __init__(self) -> None:
        self.running: str | None = None
        self.open: dict[str, str | None] = {}  # queue -> the test that declared it
        #: queue -> the connection built from settings (queues[...], a view's, the connection fixture's) that
        #: declared it: what the test reached through the project's connections, deleted after it.
        self.shared: dict[str, Any] = {}
        self.names: dict[str, str] = {}  # unique name -> the test that made it
        #: Whether this process declared anything on RabbitMQ: a session that never did (a core-only run)
        #: skips the session-end listing, and needs no rabbitmqctl.
        self.used = False
        self.lock = threading.Lock()

    def declared(self, queue: str, by: Any) -> None:
        with self.lock:
            self.used = True
            self.open.setdefault(queue, self.running)
            if by.connection is not None:
                self.shared.setdefault(queue, by)

    def deleted(self, queue: str) -> None:
        with self.lock:
            self.open.pop(queue, None)
            self.shared.pop(queue, None)

    def shared_by(self, nodeid: str) -> list[tuple[str, Any]]:
        """The queues ``nodeid`` declared through connections built from settings, with the connection."""
        with self.lock:
            return [(name, by) for name, by in self.shared.items() if self.open.get(name) in (nodeid, None)]

    def left_by(self, nodeid: str) -> list[str]:
        """Remove and return the queues ``nodeid`` (or no test, between tests) declared and left."""
        with self.lock:
            left = sorted(name for name, owner in self.open.items() if owner in (nodeid, None))
            for name in left:
                del self.open[name]
        return left


_LEDGER = _Ledger()


def broker_used() -> None:
    """Note that this session reaches RabbitMQ (a rabbitmq row's fixture), so the session-end listing runs."""
    _LEDGER.used = True


def remember(name: str, nodeid: str) -> None:
    """Record a name the queue_name fixture handed to ``nodeid``, for the session-end listing."""
    _LEDGER.names[name] = nodeid


def _patch() -> None:
    try:
        from kinetis_queue.backends.rabbitmq.queue import RabbitMqQueue
    except ImportError:  # a core-only install: no RabbitMQ test runs
        return
    declare, delete = RabbitMqQueue._declare, RabbitMqQueue.delete

    def recorded_declare(self: Any, session: Any, queue: str) -> None:
        declare(self, session, queue)
        _LEDGER.declared(queue, self)  # once the broker has it

    def recorded_delete(self: Any, queue: str) -> None:
        delete(self, queue)
        _LEDGER.deleted(queue)

    RabbitMqQueue._declare = recorded_declare  # type: ignore[method-assign]
    RabbitMqQueue.delete = recorded_delete  # type: ignore[method-assign]


def pytest_configure(config: pytest.Config) -> None:
    _patch()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    _LEDGER.running = item.nodeid
    try:
        return (yield)
    finally:
        _LEDGER.running = None


@pytest.fixture(autouse=True)
def _rabbitmq_shared_queues_deleted(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test, delete the queues it declared through a connection built from KINETIS_QUEUE: the
    process-wide ``queues[...]`` a view, a command or a hook reads (a status page's size() declares each queue
    it lists, with its ladder). Queues a test declared on a RabbitMqQueue it built itself are its own to
    delete: the teardown check names them."""
    yield
    from kinetis_queue.exceptions import ConnectionFailedError

    used = []
    for name, by in _LEDGER.shared_by(request.node.nodeid):
        try:
            by.delete(name)
        except ConnectionFailedError:  # the broker went away with the test's fault; the check reports the queue
            continue
        if all(by is not other for other in used):
            used.append(by)
    for by in used:
        by.dispose()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, object, object]:
    report = yield
    if call.when != "teardown":
        return report
    left = _LEDGER.left_by(item.nodeid)
    if left and isinstance(report, pytest.TestReport) and report.passed:
        report.outcome = "failed"
        report.longrepr = (
            f"this test declared RabbitMQ queues and did not delete them (tests/support/rabbitmq_leaks.py): "
            f"{', '.join(left)}; delete each (RabbitMqQueue.delete(), which takes its delay ladder too) in "
            f"the test or its fixture"
        )
    return report


#: Unique names the xdist workers handed over, with their tests (controller only).
_FROM_WORKERS: dict[str, str] = {}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """xdist controller: collect a finished worker's unique queue names."""
    _FROM_WORKERS.update(getattr(node, "workeroutput", {}).get(WORKER_OUTPUT, {}))


def _broker_queues() -> list[str]:
    """Every queue on the broker: one rabbitmqctl call (about a second)."""
    tool = shutil.which("rabbitmqctl")
    if tool is None:
        raise RuntimeError("rabbitmqctl is not on PATH (scripts/system-deps.sh installs rabbitmq-server)")
    listed = subprocess.run([tool, "list_queues", "-q", "name"], capture_output=True, text=True, timeout=60)
    if listed.returncode != 0:
        raise RuntimeError(f"rabbitmqctl list_queues failed: {listed.stderr.strip()}")
    return listed.stdout.split()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Session end: a broker queue carrying one of this session's unique names fails the run."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[WORKER_OUTPUT] = dict(_LEDGER.names) if _LEDGER.used else {}
        return
    names = {**(_LEDGER.names if _LEDGER.used else {}), **_FROM_WORKERS}
    if not names:
        return
    writer = session.config.get_terminal_writer()
    try:
        queues = _broker_queues()
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        writer.line(f"RabbitMQ leak check could not list the broker's queues: {exc}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        return
    leaked: dict[str, list[str]] = {}
    for queue in queues:
        for token in UNIQUE_NAME.findall(queue):
            if token in names:
                leaked.setdefault(names[token], []).append(queue)
    if leaked:
        text = "\n".join(f"  {nodeid}: {', '.join(sorted(found))}" for nodeid, found in sorted(leaked.items()))
        writer.line()
        writer.line(f"tests left RabbitMQ queues on the broker (tests/support/rabbitmq_leaks.py):\n{text}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
