"""django.tasks priority on KinetisTaskBackend (issue 19, docs/priority.md): ``supports_priority`` is the
connection's; where the store orders by priority a task's ``priority`` orders its job, elsewhere Django's
own check refuses a task with one before anything is stored."""

from __future__ import annotations

import pytest
from django.test import override_settings

from kinetis_queue.contracts import Queue
from kinetis_queue.contrib.tasks.compat import InvalidTask, task_backends
from tests import task_defs
from tests.integrations.test_tasks import tasks_on
from tests.support.backends import Backend


@pytest.mark.trait("orders_by_priority")
def test_a_task_priority_orders_its_job(connection: Queue, backend: Backend, queue_name: str) -> None:
    with override_settings(TASKS=tasks_on(backend.connection)):
        assert task_backends["default"].supports_priority
        low = task_defs.add.using(queue_name=queue_name, priority=-7).enqueue(1, 1)
        plain = task_defs.add.using(queue_name=queue_name).enqueue(2, 2)
        high = task_defs.add.using(queue_name=queue_name, priority=100).enqueue(3, 3)

    delivered = [connection.pop(5, [queue_name]) for _ in range(3)]

    assert [(job.args["result_id"], job.priority) for job in delivered if job is not None] == [
        (high.id, 100),
        (plain.id, 0),
        (low.id, -7),
    ]
    assert connection.ack_many([job for job in delivered if job is not None]) == [None] * 3


@pytest.mark.trait("refuses_priority")
def test_a_task_priority_is_refused_where_the_store_cannot_order(
    connection: Queue, backend: Backend, queue_name: str
) -> None:
    with override_settings(TASKS=tasks_on(backend.connection)):
        assert not task_backends["default"].supports_priority
        with pytest.raises(InvalidTask, match="does not support setting priority"):
            task_defs.add.using(queue_name=queue_name, priority=1).enqueue(1, 1)

    assert connection.size(queue_name) == 0
