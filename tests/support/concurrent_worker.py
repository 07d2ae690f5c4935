"""Running the worker conformance tests at ``concurrency`` 1 and 8 (issue 14).

The tests drive a worker one delivery at a time through ``process_next()``. At concurrency 8 the
``concurrency`` fixture swaps in WorkerAt8, whose ``process_next()`` is one delivery through
``run(once=True)``: the job runs in a pool thread, its ack is deferred to the ack batch, its
``--timeout`` is the watchdog's. Every assertion of the tests stays as written.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import pytest

from kinetis_queue.worker import ExitReason, Worker


class WorkerAt8(Worker):
    """A Worker at concurrency 8 whose process_next() goes through run(once=True)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("concurrency", 8)
        super().__init__(*args, **kwargs)

    def process_next(self, timeout: float, queues: Sequence[str]) -> bool:
        return self.run(timeout, queues, once=True) is ExitReason.COMPLETED


def use_concurrency(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """For a module's autouse fixture parametrized [1, 8]: at 8, the module's ``Worker`` is WorkerAt8."""
    concurrency: int = request.param
    if concurrency == 8:
        monkeypatch.setattr(sys.modules[request.module.__name__], "Worker", WorkerAt8)
    return concurrency
