"""Django's task signals from the kinetis worker (issue 19 part 4), on every store.

As Django's ImmediateBackend sends them (django/tasks/backends/immediate.py): the sender is the backend's
class and the one keyword is ``task_result``. ``task_enqueued`` once per enqueue, READY; ``task_started``
once per attempt, RUNNING, its worker id already counted (``attempts`` is the attempt's number);
``task_finished`` once, when the result is final (SUCCESSFUL or FAILED): an attempt that is retried
leaves the result READY, which Django's ``is_finished`` says is not finished.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import override_settings

from kinetis_queue.contracts import Queue
from kinetis_queue.contrib.tasks.backend import KinetisTaskBackend
from kinetis_queue.contrib.tasks.compat import TaskResult, task_enqueued, task_finished, task_started
from kinetis_queue.worker import Worker
from tests import task_option_defs as defs
from tests.support.backends import Backend
from tests.support.stray_logs import TASKS_LOGGER


@dataclass(frozen=True)
class Sent:
    signal: str
    sender: Any
    id: str
    status: str
    attempts: int
    errors: int
    keywords: frozenset[str]


@pytest.fixture
def sent() -> Iterator[list[Sent]]:
    seen: list[Sent] = []
    receivers = []
    for name, sig in (("enqueued", task_enqueued), ("started", task_started), ("finished", task_finished)):

        def receiver(sender: Any, _name: str = name, **kwargs: Any) -> None:
            result = kwargs["task_result"]
            assert isinstance(result, TaskResult)
            seen.append(
                Sent(
                    _name,
                    sender,
                    result.id,
                    result.status,
                    result.attempts,
                    len(result.errors),
                    frozenset(kwargs) - {"signal"},
                )
            )

        sig.connect(receiver, weak=False)
        receivers.append((sig, receiver))
    yield seen
    for sig, receiver in receivers:
        sig.disconnect(receiver)


@pytest.fixture
def tq(connection: Queue, backend: Backend, queue_name: str) -> Iterator[str]:
    defs.SEEN.clear()
    connection.size(queue_name)  # the store's test support creates (SQS) or tracks (RabbitMQ) the queue
    tasks = {
        "default": {
            "BACKEND": "kinetis_queue.tasks.KinetisTaskBackend",
            "QUEUES": [],
            "OPTIONS": {"CONNECTION": backend.connection},
        }
    }
    with override_settings(TASKS=tasks):
        yield queue_name


def work(connection: Queue, backend: Backend, queue: str, deliveries: int) -> None:
    worker = Worker(connection, connection=backend.connection, default_max_attempts=5, retry_base_delay=0)
    try:
        for _ in range(deliveries):
            assert worker.process_next(10, [queue])
    finally:
        worker.close()


def shape(sent: list[Sent]) -> list[tuple[str, str, int, int]]:
    return [(s.signal, s.status, s.attempts, s.errors) for s in sent]


@pytest.mark.trait("stores_jobs")
def test_a_task_retried_once_sends_started_per_attempt_and_finished_once(
    connection: Queue, backend: Backend, tq: str, sent: list[Sent], caplog: pytest.LogCaptureFixture
) -> None:
    result = defs.fails_once.using(queue_name=tq).enqueue()
    with caplog.at_level(logging.DEBUG, logger=TASKS_LOGGER):
        work(connection, backend, tq, 2)
    assert shape(sent) == [
        ("enqueued", "READY", 0, 0),
        ("started", "RUNNING", 1, 0),
        ("started", "RUNNING", 2, 1),
        ("finished", "SUCCESSFUL", 2, 1),
    ]
    assert {s.sender for s in sent} == {KinetisTaskBackend}
    assert {s.id for s in sent} == {result.id}
    assert {s.keywords for s in sent} == {frozenset({"task_result"})}
    # Django's own receivers log them as for its backends: one line per started attempt, one at the end.
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == TASKS_LOGGER]
    path = "tests.task_option_defs.fails_once"
    assert lines == [
        ("INFO", f"Task id={result.id} path={path} state=RUNNING"),
        ("INFO", f"Task id={result.id} path={path} state=RUNNING"),
        ("INFO", f"Task id={result.id} path={path} state=SUCCESSFUL"),
    ]


@pytest.mark.trait("stores_jobs")
@pytest.mark.logs_errors(TASKS_LOGGER, "kinetis_queue.worker")
def test_a_task_that_fails_for_good_sends_finished_once_failed(
    connection: Queue, backend: Backend, tq: str, sent: list[Sent]
) -> None:
    result = defs.always_fails.using(queue_name=tq).enqueue()
    work(connection, backend, tq, 2)  # max_attempts=2
    assert shape(sent) == [
        ("enqueued", "READY", 0, 0),
        ("started", "RUNNING", 1, 0),
        ("started", "RUNNING", 2, 1),
        ("finished", "FAILED", 2, 2),
    ]
    assert {s.id for s in sent} == {result.id} and {s.sender for s in sent} == {KinetisTaskBackend}


def test_on_the_sync_connection_the_order_is_django_immediate_backends(sent: list[Sent]) -> None:
    """The sync store runs the task inside its enqueue: enqueued, started, finished, in that order."""
    tasks = {"default": {"BACKEND": "kinetis_queue.tasks.KinetisTaskBackend", "OPTIONS": {"CONNECTION": "sync"}}}
    with override_settings(TASKS=tasks):
        result = defs.unique_add.enqueue(20, 22)
    assert result.status == "SUCCESSFUL" and result.return_value == 42
    assert shape(sent) == [("enqueued", "READY", 0, 0), ("started", "RUNNING", 1, 0), ("finished", "SUCCESSFUL", 1, 0)]
