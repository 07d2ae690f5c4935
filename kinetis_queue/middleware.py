"""The extension API: one ordered chain of middleware, on the push side and around each delivery (docs/middleware.md).

A middleware is a class named in ``KINETIS_QUEUE["MIDDLEWARE"]`` (dotted paths, in order; ``DEFAULT_MIDDLEWARE``
when the key is absent). It subclasses :class:`Middleware` and overrides only what it needs; a method it leaves
alone costs a push or a delivery nothing.

The push side, in a push's order: ``prepare()`` checks the push options the middleware declares in ``options``
and adds what the push carries (envelope metadata, a per-push note under ``PushDraft.notes``), with no I/O;
``send()`` wraps the store of prepared pushes, first middleware outermost: it may store some itself (the unique
jobs' lock store) or elsewhere (the transactional outbox) and hands the rest to ``store``, the next one's
``send()`` and finally the backend's. The delivery side is ``DeliveryHooks`` (kinetis_queue.hooks), whose methods
every middleware inherits.

One instance of each middleware serves every push of the process (``push_chain()``); each Worker builds its own
instances (``worker_hooks()``), as a delivery-side middleware keeps its worker's state. The chain is read from
the settings on first use and again after KINETIS_QUEUE changes; without the kinetis_queue app it is empty.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final

from django.core.signals import setting_changed
from django.dispatch import receiver

from kinetis_queue.exceptions import InvalidQueueArgumentError, QueueConfigurationError
from kinetis_queue.hooks import DeliveryHooks, HookChain

if TYPE_CHECKING:
    from kinetis_queue.contracts import PreparedPush, Queue
    from kinetis_queue.job import Job

#: The built-in features, in the order they are asked: a paused queue or a cancelled job is decided first, then an
#: expired job, then
#: a workflow's step, then a concurrency slot is taken, then a rate-limited start counted (a delivery that gets no
#: slot uses up no start), before a unique job's start; on the push side the unique
#: jobs' lock comes before the observers, which come before the outbox (a push the outbox captures is observed
#: when it is captured, as one stored directly).
DEFAULT_MIDDLEWARE: Final = (
    "kinetis_queue.control.hooks.ControlMiddleware",
    "kinetis_queue.expiry.ExpiryMiddleware",
    "kinetis_queue.workflows.hooks.WorkflowMiddleware",
    "kinetis_queue.limits.keeper.LimitsMiddleware",
    "kinetis_queue.ratelimits.RateLimitMiddleware",
    "kinetis_queue.unique.UniqueMiddleware",
    "kinetis_queue.observability.setup.ObservabilityMiddleware",
    "kinetis_queue.outbox.OutboxMiddleware",
)

#: The built-in middleware that use no model of the app: the chain of a process without the kinetis_queue app in
#: INSTALLED_APPS (or before its models are loaded), so that a unique job there says what it needs instead of
#: being pushed as a plain one.
WITHOUT_THE_APP: Final = (
    "kinetis_queue.expiry.ExpiryMiddleware",
    "kinetis_queue.limits.keeper.LimitsMiddleware",
    "kinetis_queue.ratelimits.RateLimitMiddleware",
    "kinetis_queue.unique.UniqueMiddleware",
    "kinetis_queue.outbox.OutboxMiddleware",
)

#: What ``send()`` hands the rest of the chain: it stores the prepared pushes and returns their ids, in order.
Store = Callable[[Sequence["PreparedPush"]], list[str]]


@dataclass(slots=True)
class PushDraft:
    """A push being prepared (``Queue.prepare()``), as the middleware's ``prepare()`` sees it: checked and
    serialized already; ``metadata`` and ``notes`` are the middleware's to add to."""

    queue: Queue
    job: Job
    #: The job's class path and its serialized arguments (JSON values under the argument contract).
    job_class: str
    args: Mapping[str, Any]
    #: The queue name the job goes to.
    queue_name: str
    #: The push's keyword options for middleware (those given, not None), by name.
    options: Mapping[str, Any]
    #: The envelope's metadata.
    metadata: dict[str, Any]
    #: Per-push state for the push side of a middleware, under a key of its own (``PreparedPush.notes``).
    notes: dict[str, Any] = field(default_factory=dict)
    #: Seconds until the job is due (the push's delay, checked).
    delay: float = 0.0


class Middleware(DeliveryHooks):
    """A feature in the chain; this base changes nothing (every method is an optional hook)."""

    #: The keyword options of ``push()`` this middleware takes (a push naming one no middleware takes is refused).
    options: ClassVar[frozenset[str]] = frozenset()

    def prepare(self, draft: PushDraft) -> None:
        """Check this middleware's options of a push and add what the push carries; no I/O. Raise
        InvalidQueueArgumentError for a bad option (its name, never a value)."""

    def send(self, queue: Queue, prepared: Sequence[PreparedPush], store: Store) -> list[str]:
        """Store ``prepared`` through ``store`` (the rest of the chain), or some of it another way; their ids."""
        return store(prepared)


class PushChain:
    """The push side of the chain: each method asks only the middleware that override it."""

    def __init__(self, middleware: Sequence[Middleware]) -> None:
        self.middleware = tuple(middleware)
        self.options = frozenset(name for each in self.middleware for name in each.options)
        self._prepare = tuple(each.prepare for each in self.middleware if _overrides(each, "prepare"))
        self._send = tuple(each.send for each in self.middleware if _overrides(each, "send"))

    def prepare(self, draft: PushDraft) -> None:
        """Every middleware's ``prepare()``, in order, after a check that each option given has a taker."""
        if draft.options and not self.options.issuperset(draft.options):
            unknown = sorted(set(draft.options) - self.options)
            raise InvalidQueueArgumentError(
                f"push option {unknown[0]!r} is taken by no middleware of KINETIS_QUEUE['MIDDLEWARE'] "
                "(docs/middleware.md names the built-in one that takes it)"
            )
        for prepare in self._prepare:
            prepare(draft)

    def send(self, queue: Queue, prepared: Sequence[PreparedPush], store: Store) -> list[str]:
        """Store ``prepared`` through each middleware's ``send()``, the first outermost, then ``store``."""
        return self.compose(queue, store)(prepared)

    def compose(self, queue: Queue, store: Store) -> Store:
        """The chain in front of ``store`` for ``queue``, as one callable: a queue keeps it (``Queue.send()``),
        so a push calls it without building it again."""
        for send in reversed(self._send):
            store = _bind(send, queue, store)
        return store


def _bind(send: Callable[[Queue, Sequence[PreparedPush], Store], list[str]], queue: Queue, rest: Store) -> Store:
    return lambda prepared: send(queue, prepared, rest)


def _overrides(middleware: Middleware, name: str) -> bool:
    return getattr(type(middleware), name) is not getattr(Middleware, name)


# -- the registry: the chain as the settings name it -----------------------------------------------------------


class _Registry:
    """The middleware classes KINETIS_QUEUE names, imported once, and the process's push chain."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._classes: tuple[type[Middleware], ...] | None = None
        self._push: PushChain | None = None
        self._bare: PushChain | None = None

    def classes(self) -> tuple[type[Middleware], ...]:
        if not app_loaded():
            return tuple(middleware_class(path, index) for index, path in enumerate(WITHOUT_THE_APP))
        found = self._classes
        if found is None:
            with self._lock:
                found = self._classes
                if found is None:
                    found = self._classes = middleware_paths(load=True)
        return found

    def push_chain(self) -> PushChain:
        chain = self._push
        if chain is not None:
            return chain
        if not app_loaded():
            bare = self._bare
            if bare is None:
                bare = self._bare = PushChain([cls() for cls in self.classes()])
            return bare
        chain = PushChain([cls() for cls in self.classes()])
        with self._lock:
            if self._push is None:
                self._push = chain
            return self._push

    def forget(self) -> None:
        with self._lock:
            self._classes = None
            self._push = None


_registry = _Registry()


def app_loaded() -> bool:
    """Whether the kinetis_queue app is installed and its models loaded (its ready() may still be running)."""
    from django.apps import apps

    return apps.models_ready and apps.is_installed("kinetis_queue")


def middleware_paths(*, load: bool) -> tuple[Any, ...]:
    """KINETIS_QUEUE["MIDDLEWARE"] (DEFAULT_MIDDLEWARE when absent): its dotted paths, or with ``load`` the
    classes they name. QueueConfigurationError names an entry that is not a Middleware subclass's path."""
    from django.conf import settings

    configured = getattr(settings, "KINETIS_QUEUE", None)
    paths = configured.get("MIDDLEWARE", DEFAULT_MIDDLEWARE) if isinstance(configured, Mapping) else DEFAULT_MIDDLEWARE
    if isinstance(paths, str) or not isinstance(paths, Sequence):
        raise QueueConfigurationError("KINETIS_QUEUE['MIDDLEWARE'] must be a list of dotted paths, in order")
    return tuple(middleware_class(path, index) for index, path in enumerate(paths)) if load else tuple(paths)


def middleware_class(path: object, index: int) -> type[Middleware]:
    """The Middleware subclass at dotted ``path`` (entry ``index`` of MIDDLEWARE); QueueConfigurationError
    naming the entry when it is not one."""
    from django.utils.module_loading import import_string

    where = f"KINETIS_QUEUE['MIDDLEWARE'][{index}]"
    if not isinstance(path, str) or not path:
        raise QueueConfigurationError(f"{where} must be a dotted path (a non-empty str)")
    try:
        found = import_string(path)
    except ImportError as exc:
        raise QueueConfigurationError(f"{where}: {path!r} cannot be imported ({exc})") from exc
    if not (isinstance(found, type) and issubclass(found, Middleware)):
        raise QueueConfigurationError(f"{where}: {path!r} is not a subclass of kinetis_queue.middleware.Middleware")
    return found


def push_chain() -> PushChain:
    """The push side of the chain, one instance of each middleware for the whole process."""
    return _registry.push_chain()


def worker_hooks() -> DeliveryHooks:
    """The delivery side of the chain for a new Worker: one new instance of each middleware, in order."""
    return HookChain([cls() for cls in _registry.classes()])


def forget() -> None:
    """Read the chain from the settings again at its next use (KINETIS_QUEUE changed)."""
    _registry.forget()


@receiver(setting_changed)
def _forget_on_setting_change(*, setting: str, **kwargs: Any) -> None:
    if setting == "KINETIS_QUEUE":
        forget()
