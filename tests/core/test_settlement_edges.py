"""Outcome signals that Django cannot even send: the failure is logged and the job is settled all the same.

An async receiver makes Django's send_robust() run it through async_to_sync(), which refuses to run in a
thread with a running event loop (process_next() called from inside a coroutine): that RuntimeError comes
from the signal machinery, not from a receiver, and must not undo or stop the settlement.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from kinetis_queue import queues, signals
from kinetis_queue.worker import Worker
from tests import jobs


def test_a_signal_that_cannot_be_sent_is_logged_and_the_job_is_still_settled(
    queue_name: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The ORM refuses to run under an event loop unless told the caller knows what it does.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    received: list[Any] = []

    async def receiver(sender: object, **kwargs: Any) -> None:
        received.append(kwargs)

    queue = queues["sqlite"]
    queue.push(jobs.Noop(), queue=queue_name)
    worker = Worker(queue, recorder=None)

    async def from_a_coroutine() -> bool:
        return worker.process_next(5, [queue_name])

    signals.job_succeeded.connect(receiver)
    try:
        with caplog.at_level(logging.ERROR, logger="kinetis_queue"):
            assert asyncio.run(from_a_coroutine()) is True
    finally:
        signals.job_succeeded.disconnect(receiver)
        worker.close()
    assert received == []
    assert "A signal receiver setup failed: RuntimeError(" in caplog.text
    assert queue.size(queue_name) == 0
