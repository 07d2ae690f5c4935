"""The SQS backend: ``queue.py`` holds SqsQueue (boto3), ``options.py`` its keys and SQS's own limits.

The queue classes load on first use, so importing ``options`` (the connection keys, which conf.py
checks) never imports boto3: a core-only install still validates every setting.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kinetis_queue.backends.sqs.queue import SqsHandle, SqsQueue

__all__ = ["SqsHandle", "SqsQueue"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("kinetis_queue.backends.sqs.queue"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
