"""The loop queue_work and queue_relay run beside the worker (kinetis_queue/worker/background.py): a round that raises
is logged and the loop goes on after a pause; stop() is safe before start() and twice."""

from __future__ import annotations

import logging
import threading

import pytest

from kinetis_queue.worker.background import BackgroundLoop


def test_a_round_that_raises_is_logged_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    rounds: list[int] = []
    second = threading.Event()
    stopped: list[str] = []

    def step() -> float:
        rounds.append(len(rounds) + 1)
        if len(rounds) == 1:
            raise RuntimeError("the store is away")
        second.set()
        return 60.0  # then idle until stop()

    loop = BackgroundLoop("test round", step, on_stop=lambda: stopped.append(threading.current_thread().name))
    with caplog.at_level(logging.ERROR, logger="kinetis_queue"):
        loop.start()
        assert second.wait(10)
        loop.stop()
        loop.stop()  # the thread has ended: nothing to wait for
    assert rounds == [1, 2]
    assert "The worker's test round failed: RuntimeError: the store is away" in caplog.text
    assert stopped == ["kinetis-queue-test round"]  # on_stop ran once, in the loop's thread


def test_stop_before_start_waits_for_nothing_and_calls_nothing() -> None:
    stopped: list[bool] = []
    loop = BackgroundLoop("never started", lambda: 0.0, on_stop=lambda: stopped.append(True))
    loop.stop()
    assert stopped == []
