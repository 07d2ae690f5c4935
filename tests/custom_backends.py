"""A custom backend for wiring tests: a Queue that stores nothing and cannot clear."""

from __future__ import annotations

from typing import Any

from kinetis_queue.contracts import Queue


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
