"""Nothing a job does and nothing a message holds stops the worker, or leaks through its signals (issue 12).

- Item 6: a BaseException from a job (handle(), its __init__ on reconstruction, an import its stored
  class triggers) is the job's own failure: released, then failed and recorded at the cap.
- Item 2: what the outcome signals' receivers get carries no argument value, whatever they walk into.
- Item 5: an exception whose text no database stores as is, or whose str() raises, is still recorded.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from kinetis_queue.contracts import Queue
from kinetis_queue.exceptions import JobReconstructionError
from kinetis_queue.models import FailedJob
from kinetis_queue.worker import ExitReason, Worker
from tests import hostile_jobs
from tests.conformance.test_worker import _rewrite_stored_job
from tests.support.backends import Backend
from tests.support.concurrent_worker import use_concurrency
from tests.support.helpers import steal_reservation

pytestmark = pytest.mark.trait("stores_jobs")


@pytest.fixture(autouse=True, params=[1, 8], ids=["c1", "c8"])
def concurrency(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Every test at concurrency 1 and 8 (tests/support/concurrent_worker.py)."""
    return use_concurrency(request, monkeypatch)


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    hostile_jobs.RAISED.clear()
    hostile_jobs.REBUILD_EXITS.clear()
    yield
    hostile_jobs.REBUILD_EXITS.clear()


def run_once(worker: Worker, queue_name: str) -> None:
    """One delivery through run(): the worker's own SIGINT/SIGTERM handlers are in place, as in production."""
    assert worker.run(5, [queue_name], once=True) is ExitReason.COMPLETED


# -- item 6: a job's BaseException is its own failure ----------------------------------------------------

KINDS = ["SystemExit", "KeyboardInterrupt", "GeneratorExit", "CustomBase"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_base_exception_from_handle_is_the_jobs_own_failure(
    connection: Queue, queue_name: str, outcomes: list, kind: str
) -> None:
    job_id = connection.push(hostile_jobs.RaisesBase(kind), queue=queue_name, max_attempts=2)
    worker = Worker(connection, retry_base_delay=0)
    try:
        run_once(worker, queue_name)
        run_once(worker, queue_name)
    finally:
        worker.close()
    assert [name for name, _ in outcomes] == ["job_released", "job_failed_permanently"]
    first, second = hostile_jobs.RAISED
    assert outcomes[0][1]["exception"] is first and outcomes[1][1]["exception"] is second
    assert type(second).__name__ == kind
    record = FailedJob.objects.get(job_id=job_id)
    assert record.exception_class.rsplit(".", 1)[1] == kind
    assert record.connection == connection.connection
    assert connection.size(queue_name) == 0
    assert connection.pop(0.1, [queue_name]) is None


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_system_exit_from_init_on_reconstruction_is_the_jobs_own_failure(
    connection: Queue, queue_name: str, outcomes: list
) -> None:
    job_id = connection.push(hostile_jobs.ExitsWhenRebuilt("x"), queue=queue_name, max_attempts=1)
    hostile_jobs.REBUILD_EXITS.append(True)
    worker = Worker(connection)
    try:
        run_once(worker, queue_name)
    finally:
        worker.close()
    assert [name for name, _ in outcomes] == ["job_failed_permanently"]
    assert type(outcomes[0][1]["exception"]) is SystemExit
    assert FailedJob.objects.get(job_id=job_id).exception_class == "builtins.SystemExit"
    assert connection.size(queue_name) == 0


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_stored_class_whose_module_would_raise_system_exit_is_never_imported(
    connection: Queue, queue_name: str, outcomes: list, backend: Backend
) -> None:
    """Item 6 met item 7: a payload never makes the worker import, so a module that raises SystemExit
    when imported cannot stop it; the name does not resolve, which is the job's own failure."""
    job_id = connection.push(hostile_jobs.Echo(), queue=queue_name, max_attempts=2)
    _rewrite_stored_job(backend, job_id, "tests.hostile_import.Anything", {})
    worker = Worker(connection, retry_base_delay=0)
    try:
        run_once(worker, queue_name)
        run_once(worker, queue_name)
    finally:
        worker.close()
    assert "tests.hostile_import" not in sys.modules
    assert [name for name, _ in outcomes] == ["job_released", "job_failed_permanently"]
    assert all(type(kwargs["exception"]) is JobReconstructionError for _, kwargs in outcomes)
    record = FailedJob.objects.get(job_id=job_id)
    assert record.job_class == "tests.hostile_import.Anything"
    assert record.exception_class == "kinetis_queue.exceptions.JobReconstructionError"
    assert "never imported" in record.exception_message
    assert connection.size(queue_name) == 0


# -- item 2: receivers see no argument value -------------------------------------------------------------


def _children(item: Any) -> Iterator[Any]:
    """What ``item`` holds: container items, dataclass fields, __dict__ and __slots__ values."""
    if isinstance(item, dict):
        for key, value in item.items():
            yield key
            yield value
        return
    if isinstance(item, (list, tuple, set, frozenset)):
        yield from item
        return
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        for field in dataclasses.fields(item):
            yield getattr(item, field.name, None)
    attributes = getattr(item, "__dict__", None)
    if isinstance(attributes, dict):
        yield from attributes.values()
    for cls in type(item).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if hasattr(item, name):
                yield getattr(item, name)


def leaks(root: Any, secret: str, limit: int = 50_000) -> list[str]:
    """The reprs (and strs) of everything reachable from ``root`` that contain ``secret``."""
    found: list[str] = []
    seen: set[int] = set()
    stack = [root]
    while stack and len(seen) < limit:
        item = stack.pop()
        if id(item) in seen or isinstance(item, type):
            continue
        seen.add(id(item))
        for show in (repr, str):
            try:
                text = show(item)
            except Exception:
                continue
            if secret in text:
                found.append(f"{type(item).__qualname__}: {text[:200]}")
                break
        if not isinstance(item, (str, bytes, int, float, bool)):
            stack.extend(_children(item))
    assert len(seen) < limit, "the walk did not end: the delivery reaches too much"
    return found


def _assert_clean(outcomes: list[tuple[str, dict[str, Any]]], secret: str) -> None:
    assert outcomes
    for name, kwargs in outcomes:
        shown = {key: value for key, value in kwargs.items() if key != "exception"}
        assert leaks(shown, secret) == [], name
        assert shown["job"].handle is None or leaks(repr(shown["job"].handle), secret) == []


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_receivers_get_no_argument_value_on_success_release_and_failure(
    connection: Queue, queue_name: str, outcomes: list
) -> None:
    secret = hostile_jobs.SECRET
    connection.push(hostile_jobs.Guarded("visible", secret), queue=queue_name)
    connection.push(hostile_jobs.Guarded("visible", secret, "fail"), queue=queue_name, max_attempts=2)
    worker = Worker(connection, retry_base_delay=0)
    try:
        for _ in range(3):
            assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()
    assert sorted(name for name, _ in outcomes) == ["job_failed_permanently", "job_released", "job_succeeded"]
    _assert_clean(outcomes, secret)
    # The exception is the job's own, as raised; the redacted job still says what ran.
    failures = [kwargs for name, kwargs in outcomes if "exception" in kwargs]
    assert [kwargs["exception"] for kwargs in failures] == hostile_jobs.RAISED
    for _, kwargs in outcomes:
        assert kwargs["job"].args["label"] == "visible" and kwargs["job"].args["token"] == "[redacted]"
    assert connection.size(queue_name) == 0


@pytest.mark.trait("fenced")
def test_a_lost_settlement_reports_no_argument_value(
    connection: Queue, queue_name: str, outcomes: list, backend: Backend
) -> None:
    secret = hostile_jobs.SECRET
    job_id = connection.push(hostile_jobs.Guarded("visible", secret), queue=queue_name)
    job = connection.pop(5, [queue_name])
    assert job is not None and job.id == job_id
    # Give the delivery back so the worker takes it, then make the worker's delivery stale mid-run.
    connection.release(job)
    worker = Worker(connection)

    real_handle = hostile_jobs.Guarded.handle

    def steal(self: hostile_jobs.Guarded) -> None:
        steal_reservation(backend, job_id)
        real_handle(self)

    hostile_jobs.Guarded.handle = steal  # type: ignore[method-assign]
    try:
        assert worker.process_next(5, [queue_name]) is True
    finally:
        hostile_jobs.Guarded.handle = real_handle  # type: ignore[method-assign]
        worker.close()
    assert [name for name, _ in outcomes] == ["job_settlement_lost"]
    _assert_clean(outcomes, secret)


# -- item 5: the record survives any exception text --------------------------------------------------------


@pytest.mark.parametrize("kind", ["nul", "surrogate", "controls", "huge", "unprintable"])
@pytest.mark.logs_errors("kinetis_queue.worker")
def test_an_exception_text_no_database_stores_is_recorded_escaped(
    connection: Queue, queue_name: str, outcomes: list, kind: str
) -> None:
    job_id = connection.push(hostile_jobs.HostileText(kind), queue=queue_name, max_attempts=1)
    worker = Worker(connection)
    try:
        assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()
    assert [name for name, _ in outcomes] == ["job_failed_permanently"]
    record = FailedJob.objects.get(job_id=job_id)
    assert outcomes[0][1]["failed_job_id"] == record.pk
    expected = {
        "nul": "a NUL \\x00 in the message",
        "surrogate": "a lone surrogate \\ud800 in the message",
        "controls": "escape \\x1b[31m and bell \\x07",
        "unprintable": "(the exception's message is unavailable: str() raised ValueError)",
    }
    if kind == "huge":
        assert record.exception_message.endswith("...[truncated]") and len(record.exception_message) == 65_536
    else:
        assert record.exception_message == expected[kind]
    assert connection.size(queue_name) == 0
