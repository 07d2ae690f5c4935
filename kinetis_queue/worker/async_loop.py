"""The event loop that runs ``async def handle()`` jobs: one loop per process, in a thread of its own.

A delivery whose job has an ``async def handle`` still takes one of the worker's ``--concurrency``
slots; the slot's thread (or the main thread at concurrency 1) only waits while the coroutine runs
on the loop, so every async job of the process shares that one loop. The coroutine runs in a copy
of the calling thread's context (per-job hygiene, as for a sync job). A time limit is enforced by
cancelling the coroutine: the job sees ``asyncio.CancelledError`` at its current ``await``, and the
attempt fails with JobTimeoutError.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from collections.abc import Coroutine
from typing import Any

from kinetis_queue.exceptions import JobTimeoutError

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def _running_loop() -> asyncio.AbstractEventLoop:
    """The process's job loop, started on first use (a daemon thread: it never holds an exit back)."""
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="kinetis-queue-event-loop", daemon=True).start()
            _loop = loop
        return _loop


async def _bounded(coroutine: Coroutine[Any, Any, Any], seconds: float | None) -> None:
    if seconds is None:
        await coroutine
        return
    try:
        await asyncio.wait_for(coroutine, seconds)
    except TimeoutError:
        raise JobTimeoutError(seconds) from None


def run_coroutine(coroutine: Coroutine[Any, Any, Any], seconds: float | None = None) -> None:
    """Run ``coroutine`` to its end on the process's loop and wait for it here; what it raises is raised
    here. With ``seconds``, it is cancelled once they pass and JobTimeoutError is raised instead."""
    loop = _running_loop()
    context = contextvars.copy_context()
    done: concurrent.futures.Future[None] = concurrent.futures.Future()

    def start() -> None:
        task = loop.create_task(_bounded(coroutine, seconds), context=context)
        task.add_done_callback(lambda ended: _copy_outcome(ended, done))

    loop.call_soon_threadsafe(start)
    done.result()


def _copy_outcome(task: asyncio.Task[None], done: concurrent.futures.Future[None]) -> None:
    if task.cancelled():
        done.set_exception(asyncio.CancelledError())
    elif (error := task.exception()) is not None:
        done.set_exception(error)
    else:
        done.set_result(None)
