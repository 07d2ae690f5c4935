"""Django's own task tests (``tests/tasks`` of the Django sdist), pointed at KinetisTaskBackend.

The generic tests of Django's TaskTestCase and DummyBackendTestCase run unchanged against this
backend; the few that read DummyBackend's internals are skipped with the reason named, and so are
the priority tests on a connection whose store cannot order by priority (SQS, RabbitMQ; the sqlite and
redis connections here both can). (The async tests calling the sync refresh()/get_result() run: the
backend reads off the loop.)
"""

from __future__ import annotations

import unittest
from collections.abc import Callable
from typing import Any, TypeVar

from django.test import TransactionTestCase, override_settings
from tasks import test_dummy_backend, test_tasks  # Django's tests/, from the sdist

from kinetis_queue import queues
from kinetis_queue.models import TaskResultRecord

BACKEND = "kinetis_queue.tasks.KinetisTaskBackend"
T = TypeVar("T", bound=type)


def purge() -> None:
    """Forget every stored result and every waiting job of the queues Django's tests use."""
    TaskResultRecord.objects.all().delete()
    clearable = queues.clearable()
    for name in ("default", "queue_1"):
        clearable.clear(name)


def skip(names: list[str], reason: str) -> Callable[[T], T]:
    def decorate(cls: T) -> T:
        for name in names:
            setattr(cls, name, unittest.skip(reason)(getattr(cls, name)))
        return cls

    return decorate


DUMMY_INTERNALS = "reads DummyBackend internals (.results, .clear(), isinstance DummyBackend)"
PRIORITY = "needs supports_priority: this connection's store cannot order jobs within a queue (docs/priority.md)"
#: Whether the connection the tests push through (KINETIS_UPSTREAM_CONNECTION) orders by priority.
ORDERS_BY_PRIORITY = queues.default().supports_priority


@skip(
    ["test_using_correct_backend", "test_get_backend", "test_enqueue_task", "test_enqueue_task_async"], DUMMY_INTERNALS
)
@skip([] if ORDERS_BY_PRIORITY else ["test_chained_using"], PRIORITY)
@override_settings(
    TASKS={
        "default": {"BACKEND": BACKEND, "QUEUES": ["default", "queue_1"]},
        "immediate": {"BACKEND": "django.tasks.backends.immediate.ImmediateBackend", "QUEUES": []},
        "missing": {"BACKEND": "does.not.exist"},
    },
    USE_TZ=True,
)
class KinetisTaskTestCase(test_tasks.TaskTestCase, TransactionTestCase):  # type: ignore[misc]
    def setUp(self) -> None:
        purge()

    def tearDown(self) -> None:
        purge()


@skip(
    [
        "test_using_correct_backend",
        "test_clear",
        "test_enqueue_task",
        "test_enqueue_task_async",
        "test_refresh_result",
        "test_refresh_result_async",
    ],
    DUMMY_INTERNALS,
)
@override_settings(TASKS={"default": {"BACKEND": BACKEND, "QUEUES": []}})
class KinetisQueueBackendTestCase(test_dummy_backend.DummyBackendTestCase, TransactionTestCase):  # type: ignore[misc]
    def setUp(self) -> None:
        purge()

    def tearDown(self) -> None:
        purge()


def _priority_tests(cls: Any) -> list[str]:
    return [name for name in dir(cls) if name.startswith("test_") and "priority" in name]


if not ORDERS_BY_PRIORITY:
    skip(_priority_tests(KinetisTaskTestCase), PRIORITY)(KinetisTaskTestCase)
    skip(_priority_tests(KinetisQueueBackendTestCase), PRIORITY)(KinetisQueueBackendTestCase)

del test_tasks, test_dummy_backend
