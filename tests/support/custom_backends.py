"""A custom backend for wiring tests: a Queue that stores nothing and cannot clear."""

from __future__ import annotations

from typing import Any

from kinetis_queue.backends.sql.queue import SqlQueue
from kinetis_queue.contracts import Queue
from kinetis_queue.schema import BackendOptions, KeyPath, Option, fail, integer


class NotClearable(Queue):
    """Implements only the base interface, so it is not a ClearableQueue."""

    backend_name = "notclearable"

    def _push(self, *args: Any) -> None:
        pass

    def _sweep(self, *args: Any) -> None:
        return None

    def _release(self, *args: Any) -> None:
        pass

    def _size(self, *args: Any) -> int:
        return 0

    def ack(self, *args: Any) -> None:
        pass

    def fail(self, *args: Any) -> None:
        pass


def _colour(value: Any, path: KeyPath) -> None:
    if value not in ("red", "blue"):
        raise fail(path, "must be 'red' or 'blue'")


class WithOptions(NotClearable):
    """A custom backend that declares its own keys: conf.py checks them and fills in their defaults."""

    backend_name = "withoptions"
    settings_schema = BackendOptions(
        (Option("COLOUR", "blue", _colour), Option("LIMIT", 5, integer(1, 10))), max_visibility_timeout=600
    )


class SqlWithoutBatch(SqlQueue):
    """A custom backend that implements only the single-delivery primitives: the SQL backend's, with
    its batch primitives set back to the contract's defaults (one ``_sweep()`` per ``pop_many()``
    sweep, one ``ack()`` per acked job, ``_unreserve()`` as an immediate release, a plain pause)."""

    backend_name = "sqlwithoutbatch"
    _push_many = Queue._push_many
    _sweep_many = Queue._sweep_many
    _ack_many = Queue._ack_many
    _unreserve = Queue._unreserve
    _wait = Queue._wait
