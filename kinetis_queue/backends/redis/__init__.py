"""The Redis backend: ``queue.py`` holds RedisQueue, ``client.py`` the connection, one ``.lua`` per script,
``options.py`` its keys.

The queue classes load on first use, so importing ``options`` (the connection keys, which conf.py
checks) never imports the client library: a core-only install still validates every setting.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kinetis_queue.backends.redis.queue import RedisHandle, RedisQueue

__all__ = ["RedisHandle", "RedisQueue"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("kinetis_queue.backends.redis.queue"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
