"""How connections name a built-in backend that cannot be imported, and the default-queue proxy."""

from __future__ import annotations

import sys

import pytest

from kinetis_queue import connections, queue
from kinetis_queue.exceptions import QueueUnavailableError


def test_a_builtin_backend_whose_import_fails_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its client library is installed but the backend cannot be imported (a broken install): say which."""
    monkeypatch.delitem(sys.modules, "kinetis_queue.backends.redis", raising=False)
    monkeypatch.setitem(sys.modules, "kinetis_queue.backends.redis", None)  # import now raises ImportError
    with pytest.raises(QueueUnavailableError) as raised:
        connections.build("redis")
    assert str(raised.value).startswith("connection 'redis': the redis backend is not available (")


def test_the_default_queue_proxy_says_what_it_stands_for() -> None:
    assert repr(queue) == "<default kinetis_queue connection>"
