"""Silence check (issue 28): a green run prints nothing that reads as a failure.

A handler on the root logger keeps every record at ERROR or above, from any logger (kinetis_queue's
propagate to the root), with the test that was running in this process when it arrived: a record from
a background thread that outlived its test (a worker's control or registry loop polling a database the
next test may no longer reach) is charged to whichever test is running then, or, after the last test,
reported at session end. The test's teardown report then fails, listing the records.

A test that expects such records says so: it takes pytest's ``caplog`` fixture (and asserts on what it
captured), or carries ``@pytest.mark.logs_errors("kinetis_queue.worker", ...)`` naming the loggers whose
ERROR records it provokes on purpose (a job that fails for good is logged by ``kinetis_queue.worker``); a
record from any other logger (a background loop's ``kinetis_queue``) still fails it. The marker without
names exempts every logger; use it only where the test provokes records from loggers it cannot list.
"""

from __future__ import annotations

import importlib.util
import logging
import threading
from collections import Counter
from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import pytest

#: The marker a test carries when it expects ERROR records and does not take caplog.
MARKER = "logs_errors"

#: The logger of Django's Tasks framework, which logs a task that fails for good at ERROR: ``django.tasks`` from
#: Django 6, ``django_tasks`` in the backport the Django 5.2 stage runs.
TASKS_LOGGER = "django.tasks" if importlib.util.find_spec("django.tasks") else "django_tasks"


@dataclass(frozen=True)
class Stray:
    """One ERROR record, with the test running when it arrived (None: between tests or after the last)."""

    nodeid: str | None
    phase: str
    logger: str
    thread: str
    message: str

    def describe(self) -> str:
        return f"{self.logger} [{self.phase}, thread {self.thread}]: {self.message}"


class _Recorder(logging.Handler):
    """Keeps ERROR records, charged to the running test; thread-safe (records arrive from any thread)."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.running: str | None = None
        self.phase = "between tests"
        self.strays: list[Stray] = []
        #: Loggers whose records are expected now (expected_errors() blocks in progress, by logger).
        self.expecting: Counter[str] = Counter()
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        if self.expecting[record.name] > 0:
            return
        try:
            message = record.getMessage()
        except Exception:  # a record whose arguments do not format is still a record
            message = f"{record.msg!r} % {record.args!r}"
        if record.exc_info and record.exc_info[0] is not None:
            message += f" ({record.exc_info[0].__name__})"
        with self._guard:
            self.strays.append(Stray(self.running, self.phase, record.name, record.threadName or "?", message))

    def take(self, nodeid: str | None) -> list[Stray]:
        """Remove and return the records charged to ``nodeid``."""
        with self._guard:
            taken = [each for each in self.strays if each.nodeid == nodeid]
            self.strays = [each for each in self.strays if each.nodeid != nodeid]
        return taken


_RECORDER = _Recorder()


@contextmanager
def expected_errors(*loggers: str) -> Iterator[None]:
    """Records from ``loggers`` (exact names) are expected while the block runs, from any thread: for a
    fixture or helper that provokes them on purpose (a job made to fail for good, to list it in the admin).

    Narrower than the logs_errors marker: a record from another logger, or after the block, still counts.
    """
    with _RECORDER._guard:
        _RECORDER.expecting.update(loggers)
    try:
        yield
    finally:
        with _RECORDER._guard:
            _RECORDER.expecting.subtract(loggers)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(*loggers): the test provokes log records at ERROR or above from these loggers (all, if none "
        "is named) and does not take caplog (tests/support/stray_logs.py: otherwise such a record fails it)",
    )
    logging.getLogger().addHandler(_RECORDER)


def pytest_unconfigure(config: pytest.Config) -> None:
    logging.getLogger().removeHandler(_RECORDER)


def _unexpected(item: pytest.Item, strays: list[Stray]) -> list[Stray]:
    """The records ``item`` did not declare: none if it takes caplog; else those its markers do not name."""
    if "caplog" in getattr(item, "fixturenames", ()):
        return []
    markers = list(item.iter_markers(MARKER))
    if any(not marker.args for marker in markers):
        return []
    expected = {name for marker in markers for name in marker.args}
    return [each for each in strays if each.logger not in expected]


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    _RECORDER.running = item.nodeid
    try:
        return (yield)
    finally:
        _RECORDER.running = None
        _RECORDER.phase = "between tests"


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    _RECORDER.phase = "setup"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    _RECORDER.phase = "call"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    _RECORDER.phase = "teardown"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, object, object]:
    report = yield
    if call.when != "teardown":
        return report
    strays = _unexpected(item, _RECORDER.take(item.nodeid))
    if strays and isinstance(report, pytest.TestReport) and report.passed:
        lines = "\n".join(f"  {each.describe()}" for each in strays)
        report.outcome = "failed"
        loggers = ", ".join(sorted({each.logger for each in strays}))
        phases = ", ".join(sorted({each.phase for each in strays}))
        report.longrepr = (
            f"{len(strays)} log record(s) at ERROR or above from {loggers} ({phases}) arrived during this test, "
            f"which neither takes "
            f"caplog nor is marked {MARKER} (tests/support/stray_logs.py); a worker or loop an earlier test "
            f"left running may be their source:\n{lines}"
        )
    return report


#: The key under which an xdist worker hands its late records to the controller (config.workeroutput).
WORKER_OUTPUT = "kq_stray_logs"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Records left after the last test's teardown (from a thread that outlived the whole run) fail the run:
    an xdist worker hands them to the controller, which reports them with its own (no worker's exit status
    reaches the controller)."""
    with _RECORDER._guard:
        late, _RECORDER.strays = _RECORDER.strays, []
    lines = [f"{each.nodeid or '(between tests)'}: {each.describe()}" for each in late]
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[WORKER_OUTPUT] = lines
        return
    lines += _FROM_WORKERS
    if lines:
        text = "\n".join(f"  {line}" for line in lines)
        session.config.get_terminal_writer().line()
        session.config.get_terminal_writer().line(
            f"log records at ERROR or above arrived after the last test (tests/support/stray_logs.py):\n{text}",
            red=True,
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


#: Late records the xdist workers handed over (controller only).
_FROM_WORKERS: list[str] = []


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: object, error: object) -> None:
    """xdist controller: collect a finished worker's late records (xdist calls this hook on the controller)."""
    _FROM_WORKERS.extend(getattr(node, "workeroutput", {}).get(WORKER_OUTPUT, []))
