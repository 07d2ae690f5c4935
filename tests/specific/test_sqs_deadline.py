"""SQS pop() whose deadline is already past when its first sweep comes back (kinetis_queue/backends/sqs/queue.py,
``_reserve``): it returns empty at once instead of long-polling past its deadline."""

from __future__ import annotations

from typing import Any

from kinetis_queue import connections
from kinetis_queue.backends.sqs.queue import SqsQueue
from tests.support.sqs_server import SqsTestQueues


def test_a_pop_whose_deadline_passed_during_its_sweep_returns_without_a_long_poll(
    sqs_queues: SqsTestQueues, queue_name: str
) -> None:
    """A microsecond's deadline is over once the sweep's ReceiveMessage (WaitTimeSeconds 0) came back empty:
    no second ReceiveMessage, not even one of WaitTimeSeconds 0 (the deadline rounded up)."""
    queue = connections.build("sqs")
    assert isinstance(queue, SqsQueue)
    sqs_queues.prepare(queue)
    waits: list[int] = []

    def record(params: dict[str, Any], **kwargs: Any) -> None:
        waits.append(params["WaitTimeSeconds"])

    try:
        assert queue.size(queue_name) == 0  # the queue exists before the pop
        queue.client.meta.events.register("before-parameter-build.sqs.ReceiveMessage", record)
        assert queue.pop(0.000001, [queue_name]) is None
        assert queue.pop_many(0.000001, [queue_name], 5).jobs == []
    finally:
        queue.dispose()
    assert waits == [0, 0]  # one sweep each
