"""queue_status on a backend that cannot list its queues: it reports the default queue."""

from __future__ import annotations

from kinetis_queue import connections, status
from kinetis_queue.backends.rabbitmq import RabbitMqQueue


def test_a_backend_that_cannot_list_queues_reports_the_default_queue() -> None:
    """AMQP has no way to list a broker's queues: without --queue, the figures are the default queue's."""
    queue = connections.build("rabbitmq")
    try:
        assert isinstance(queue, RabbitMqQueue)
        assert queue.queue_names() is None
    finally:
        queue.dispose()
    [figures] = status.collect("rabbitmq")
    assert figures.error is None
    assert [row.queue for row in figures.queues] == ["default"]
