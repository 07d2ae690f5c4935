"""Conformance: a middleware from outside the package, added in settings (KINETIS_QUEUE["MIDDLEWARE"]), runs on
every row on both sides of the chain, beside the built-in ones (docs/middleware.md)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings

from kinetis_queue import middleware
from kinetis_queue.contracts import Queue
from kinetis_queue.middleware import DEFAULT_MIDDLEWARE
from kinetis_queue.worker import Worker
from tests import counting_middleware, jobs

pytestmark = pytest.mark.trait("stores_jobs")

COUNTER = "tests.counting_middleware.CountAttempts"


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The built-in chain with CountAttempts at its end. The setting is changed in place, without Django's
    setting_changed (which would close the connection under test), and the chain read again."""
    monkeypatch.setitem(settings.KINETIS_QUEUE, "MIDDLEWARE", [*DEFAULT_MIDDLEWARE, COUNTER])
    middleware.forget()
    counting_middleware.reset()
    yield
    monkeypatch.undo()
    middleware.forget()


def test_an_outside_middleware_sees_each_push_and_each_attempt(
    connection: Queue, queue_name: str, counted: None, outcomes: list
) -> None:
    connection.push(jobs.Records("one"), queue=queue_name)
    connection.push_many([jobs.Records("two"), jobs.Noop()], queue=queue_name)
    worker = Worker(connection)
    try:
        for _ in range(3):
            assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()
    assert dict(counting_middleware.STARTED) == {"tests.jobs.Records": 2, "tests.jobs.Noop": 1}
    assert counting_middleware.MARKS == [queue_name] * 3
    assert [name for name, _ in outcomes] == ["job_succeeded"] * 3


def test_the_built_in_features_still_run_beside_it(connection: Queue, queue_name: str, counted: None) -> None:
    """Unique jobs keep working with an outside middleware after them: the second push gets the holder's id."""
    first = connection.push(jobs.Records("u"), queue=queue_name, unique_key="same", unique_for=60)
    second = connection.push(jobs.Records("u"), queue=queue_name, unique_key="same", unique_for=60)
    assert second == first
    assert connection.size(queue_name) == 1


LIFECYCLE = "tests.counting_middleware.Lifecycle"

#: Each path's calls, in order, as Lifecycle records them for a job labelled ``label``: the attempt's admit() and
#: claim(), its start, unclaim() before the settlement's own hooks, the report, and ended() last, once.
PATHS = {
    "succeeded": (
        "ok",
        jobs.Records,
        None,
        ["admit", "claim", "started", "unclaim", "succeeding", "reported succeeded", "ended"],
    ),
    "released": ("again", jobs.Fails, 2, ["admit", "claim", "started", "unclaim", "reported released", "ended"]),
    "failed": ("done", jobs.Fails, 1, ["admit", "claim", "started", "unclaim", "failing", "reported failed", "ended"]),
    "skipped": ("skip", jobs.Records, None, ["admit", "skipped", "reported skipped", "ended"]),
    "deferred": ("defer", jobs.Records, None, ["admit", "claim", "reported deferred", "ended"]),
}


@pytest.mark.logs_errors("kinetis_queue.worker")  # the final failure's log line
@pytest.mark.parametrize("path", sorted(PATHS))
def test_each_delivery_path_calls_each_hook_once_in_order(
    connection: Queue, queue_name: str, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    label, job_class, max_attempts, expected = PATHS[path]
    monkeypatch.setitem(settings.KINETIS_QUEUE, "MIDDLEWARE", [*DEFAULT_MIDDLEWARE, LIFECYCLE])
    middleware.forget()
    counting_middleware.reset()
    try:
        connection.push(job_class(label), queue=queue_name, max_attempts=max_attempts)
        worker = Worker(connection, recorder=None)
        try:
            assert worker.process_next(5, [queue_name]) is True
        finally:
            worker.close()
    finally:
        monkeypatch.undo()
        middleware.forget()
        if hasattr(connection, "clear"):  # the released and the deferred job wait (else under this test's own name)
            connection.clear(queue_name)
    assert [" ".join(event[:1] + event[2:]) for event in counting_middleware.EVENTS] == expected
    assert {event[1] for event in counting_middleware.EVENTS} == {label}
