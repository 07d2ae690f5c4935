"""The RabbitMQ backend's connection keys (``"BACKEND": "rabbitmq"``); imports no client library.

The URL's full parse (host, port, vhost) happens when the queue is built (session.parse_url), naming
the same key.
"""

from __future__ import annotations

from typing import Any, Final

from kinetis_queue.schema import BackendOptions, BuiltinBackend, KeyPath, Option, fail, integer

#: Used when a connection sets no URL.
DEFAULT_URL: Final = "amqp://guest:guest@localhost:5672//"
#: Heartbeat interval proposed to the broker, in seconds (RabbitMQ's own default); 0 disables it.
DEFAULT_HEARTBEAT: Final = 60
#: Largest heartbeat interval AMQP can negotiate (an unsigned short).
MAX_HEARTBEAT: Final = 65535
#: QUEUE_TYPE's values: RabbitMQ's classic queues (the default), or quorum queues (replicated by Raft;
#: docs/backends/rabbitmq.md, "Quorum queues").
QUEUE_TYPES: Final = ("classic", "quorum")
#: Seconds a concurrency slot (kinetis_queue.limits) is leased for, renewed while its job runs: a
#: delivery has no visibility timeout here to borrow, so this bounds how long a crashed worker's slots stay taken.
DEFAULT_SLOT_LEASE: Final = 60


def _url(value: Any, path: KeyPath) -> None:
    if type(value) is not str or not value.startswith(("amqp://", "amqps://")):
        raise fail(path, "must be an amqp:// or amqps:// URL")


def _queue_type(value: Any, path: KeyPath) -> None:
    if value not in QUEUE_TYPES or type(value) is not str:
        raise fail(path, f"must be one of {', '.join(repr(name) for name in QUEUE_TYPES)}")


OPTIONS = BackendOptions(
    (
        Option("URL", DEFAULT_URL, _url),
        Option("HEARTBEAT", DEFAULT_HEARTBEAT, integer(0, MAX_HEARTBEAT)),
        Option("SLOT_LEASE", DEFAULT_SLOT_LEASE, integer(1, 86_400)),
        Option("QUEUE_TYPE", "classic", _queue_type),
    )
)
#: This backend, as conf finds it (kinetis_queue.conf.builtin_backends).
BACKEND = BuiltinBackend(
    "rabbitmq", "kinetis_queue.backends.rabbitmq.RabbitMqQueue", OPTIONS, client="amqp", extra="rabbitmq"
)
