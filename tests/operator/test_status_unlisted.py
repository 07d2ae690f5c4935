"""queue_status on a backend that cannot list its queues: it reports the default queue."""

from __future__ import annotations

from django.conf import settings
from django.test import override_settings

from kinetis_queue import connections
from kinetis_queue.backends.rabbitmq import RabbitMqQueue
from kinetis_queue.observability import status


def test_a_backend_that_cannot_list_queues_reports_the_default_queue() -> None:
    """AMQP has no way to list a broker's queues: without --queue, and with no failed record naming a queue
    of the connection (a connection of its own, so other tests' records cannot add any), the figures are
    the default queue's."""
    setting = settings.KINETIS_QUEUE
    unlisted = {**setting["CONNECTIONS"]["rabbitmq"]}
    with override_settings(KINETIS_QUEUE={**setting, "CONNECTIONS": {**setting["CONNECTIONS"], "unlisted": unlisted}}):
        queue = connections.build("unlisted")
        try:
            assert isinstance(queue, RabbitMqQueue)
            assert queue.queue_names() is None
            # The test broker is shared with the rabbitmqquorum connection, whose status (any test collecting
            # every connection's figures) declares its own "default" queue as a quorum queue, which a classic
            # declaration is then refused. A queue's type cannot change on a broker (docs/backends/rabbitmq.md),
            # so this test starts from no "default" queue rather than from whichever type another test left.
            queue.delete("default")
        finally:
            queue.dispose()
        [figures] = status.collect("unlisted")
    assert figures.error is None
    assert [row.queue for row in figures.queues] == ["default"]
