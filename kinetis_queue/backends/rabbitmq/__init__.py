"""The RabbitMQ backend (``"BACKEND": "rabbitmq"``): see queue.py, ladder.py for delays, options.py for its keys.

The queue classes load on first use, so importing ``options`` (the connection keys, which conf.py
checks) never imports the client library: a core-only install still validates every setting.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kinetis_queue.backends.rabbitmq.queue import RabbitMqDelivery, RabbitMqQueue

__all__ = ["RabbitMqDelivery", "RabbitMqQueue"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("kinetis_queue.backends.rabbitmq.queue"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
