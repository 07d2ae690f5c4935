"""How connections name a built-in backend that cannot be imported, and the default-queue proxy."""

from __future__ import annotations

import inspect
import sys
import threading

import pytest

from kinetis_queue import connections, queue
from kinetis_queue.exceptions import QueueUnavailableError
from tests.support.helpers import wait_until


def _with_lock_line() -> int:
    """The line of ConnectionHandler.__getitem__ that takes the lock (looked up, so edits above it are fine)."""
    lines, start = inspect.getsourcelines(connections.ConnectionHandler.__getitem__)
    return start + next(number for number, line in enumerate(lines) if "with self._lock" in line)


WITH_LOCK_LINE = _with_lock_line()


def test_a_builtin_backend_whose_import_fails_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its client library is installed but the backend cannot be imported (a broken install): say which."""
    monkeypatch.delitem(sys.modules, "kinetis_queue.backends.redis", raising=False)
    monkeypatch.setitem(sys.modules, "kinetis_queue.backends.redis", None)  # import now raises ImportError
    with pytest.raises(QueueUnavailableError) as raised:
        connections.build("redis")
    assert str(raised.value).startswith("connection 'redis': the redis backend is not available (")


def test_the_default_queue_proxy_says_what_it_stands_for() -> None:
    assert repr(queue) == "<default kinetis_queue connection>"


def test_a_queue_built_while_waiting_for_the_lock_is_shared_not_built_again() -> None:
    """Two threads asking for a connection at once end with one queue (one client, one pool)."""
    handler = connections.ConnectionHandler()
    first = connections.build("sqlite")
    got: list[object] = []
    asking = threading.Thread(target=lambda: got.append(handler["sqlite"]))
    with handler._lock:  # another thread is building the queue
        asking.start()

        def waiting_for_the_lock() -> bool:
            frame = sys._current_frames().get(asking.ident or 0)
            return frame is not None and frame.f_code.co_name == "__getitem__" and frame.f_lineno == WITH_LOCK_LINE

        wait_until(waiting_for_the_lock, timeout=10)
        handler._queues["sqlite"] = first  # ... and now stores it
    asking.join(10)
    assert got == [first]
    assert handler["sqlite"] is first
    handler.dispose_all()
