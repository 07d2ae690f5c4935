"""The SQL backend: ``queue.py`` holds SqlQueue, ``claim.py`` the claim query per database,
``options.py`` its keys.

The queue classes load on first use, so importing ``options`` (the connection keys, which conf.py
checks) never imports the client library: a core-only install still validates every setting.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kinetis_queue.backends.sql.queue import SqlHandle, SqlQueue

__all__ = ["SqlHandle", "SqlQueue"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("kinetis_queue.backends.sql.queue"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
