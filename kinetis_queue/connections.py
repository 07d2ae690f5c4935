"""``queues[name]`` and ``queue``: the configured connections, built lazily once per process.

The shape of Django's ``caches``/``cache``. Built queues are dropped (and disposed) when the
KINETIS_QUEUE setting changes, so ``override_settings`` works in tests.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver

from kinetis_queue import conf
from kinetis_queue.contracts import ClearableQueue, DisposableQueue, Queue
from kinetis_queue.exceptions import QueueConfigurationError, QueueNotClearableError, QueueUnavailableError
from kinetis_queue.outbox import attach
from kinetis_queue.outbox.database import DatabaseOutbox


def backend_class(settings: conf.ConnectionSettings) -> type[Queue]:
    """The Queue class a connection names; QueueUnavailableError when its client library is missing."""
    builtin = conf.builtin_backends().get(settings.backend)
    if builtin is not None:
        path, client, extra = builtin.queue_class, builtin.client, builtin.extra
        if client is not None and importlib.util.find_spec(client) is None:
            raise QueueUnavailableError(
                f"connection {settings.name!r} uses the {settings.backend} backend, whose client library "
                f"{client!r} is not installed: pip install 'kinetis-queue[{extra}]'"
            )
    else:
        path = settings.backend
    module_name, _, class_name = path.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if builtin is not None:
            raise QueueUnavailableError(
                f"connection {settings.name!r}: the {settings.backend} backend is not available ({exc})"
            ) from exc
        raise QueueConfigurationError(
            f"KINETIS_QUEUE['CONNECTIONS'][{settings.name!r}]['BACKEND'] cannot be imported: {exc}"
        ) from exc
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Queue)):
        raise QueueConfigurationError(
            f"KINETIS_QUEUE['CONNECTIONS'][{settings.name!r}]['BACKEND'] does not name a Queue subclass"
        )
    return cls


def build(name: str | None = None) -> Queue:
    """Build a fresh queue for connection ``name`` (not cached: the caller owns it and disposes it)."""
    return build_from(conf.connection_settings(name))


def build_from(settings: conf.ConnectionSettings) -> Queue:
    """Build a fresh queue from a connection's settings, its outbox included (the caller owns and disposes it)."""
    queue = backend_class(settings).from_settings(settings)
    if settings.outbox is not None:
        attach(queue, DatabaseOutbox(settings.name, settings.outbox))
    return queue


class ConnectionHandler:
    """Maps connection names to their queue, built on first use and kept for the process."""

    def __init__(self) -> None:
        self._queues: dict[str, Queue] = {}
        self._lock = threading.Lock()

    def __getitem__(self, name: str) -> Queue:
        queue = self._queues.get(name)
        if queue is not None:
            return queue
        with self._lock:
            queue = self._queues.get(name)
            if queue is None:
                queue = build(name)
                self._queues[name] = queue
        return queue

    @property
    def default_name(self) -> str:
        return conf.load().default_connection

    def default(self) -> Queue:
        return self[self.default_name]

    def clearable(self, name: str | None = None) -> ClearableQueue:
        """The connection's queue when it can clear; QueueNotClearableError naming the backend otherwise."""
        queue = self.default() if name is None else self[name]
        if not isinstance(queue, ClearableQueue):
            raise QueueNotClearableError(
                f"connection {queue.connection!r} uses the {queue.backend_name} backend "
                f"({type(queue).__name__}), which is not a ClearableQueue"
            )
        return queue

    def dispose_all(self) -> None:
        """Dispose every built queue that owns a connection, and forget them all."""
        with self._lock:
            built, self._queues = self._queues, {}
        for queue in built.values():
            if isinstance(queue, DisposableQueue):
                queue.dispose()


class DefaultQueueProxy:
    """``queue``: forwards to the default connection, looked up at each use."""

    def __getattr__(self, name: str) -> Any:
        return getattr(queues.default(), name)

    def __repr__(self) -> str:
        return "<default kinetis_queue connection>"


queues = ConnectionHandler()
queue = DefaultQueueProxy()


@receiver(setting_changed)
def _reset_on_setting_change(*, setting: str, **kwargs: Any) -> None:
    if setting in ("KINETIS_QUEUE", "DATABASES"):
        queues.dispose_all()
    # What else KINETIS_QUEUE decides forgets itself, each where it is kept: the middleware chain
    # (kinetis_queue.middleware, which holds observability's switches), the classes a push accepts
    # (payload/registry.py).
