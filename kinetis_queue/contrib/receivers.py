"""Queued signal receivers: Django's counterpart of the contract's queued event listeners.

``@queued_receiver(signal)`` connects a small receiver in place of the function: each ``send()``
pushes a job carrying the function's import path, the sender's label and the signal's keyword
arguments; a worker then imports the function and calls it. What the contract says of queued
listeners holds here too:

- the keyword arguments must meet the argument contract (JSON values; no model instances, no
  ``Enum`` or ``datetime`` since they are nested in one map); a bad one raises
  UnserializableJobError from ``send()`` naming the argument, and nothing is pushed;
- the function runs on the worker that pops the job, once per attempt, so it needs the same
  idempotency as any job; it is called as ``receiver(sender=<label>, **kwargs)``, where the label
  is the sender's dotted path (a class) or its text (a string), and without ``signal``;
- the keyword arguments are logged and shown as ``[redacted]`` whole, wherever they appear;
- it cannot change what ``send()`` returns to the sender beyond the job id, and it never sees the
  sender's objects, only their JSON copies;
- the push happens during ``send()``. On the SQL backend, inside ``atomic()`` on the queue's own
  database, it is part of that transaction; on any other store it is not, so a job can run before
  the commit or survive a rollback. ``on_commit=True`` pushes from ``transaction.on_commit`` instead.

A payload can only name a function registered by this decorator in the worker's process before
the message arrived (its module discovered at start-up, listed in KINETIS_QUEUE["IMPORTS"], or
imported by the project; see registry.py): it never makes the worker import a module or call
anything else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, TypeVar

from django.dispatch import Signal

from kinetis_queue.connections import queues
from kinetis_queue.dispatch import push_after_commit
from kinetis_queue.exceptions import JobReconstructionError, UnserializableJobError
from kinetis_queue.job import Job, Sensitive
from kinetis_queue.payload import registry
from kinetis_queue.payload.serializer import serialize_job
from kinetis_queue.validation import validate_delay, validate_max_attempts, validate_queue_name

F = TypeVar("F", bound=Callable[..., Any])

#: Every function decorated in this process, by import path: the only ones a worker calls.
_RECEIVERS: dict[str, Callable[..., Any]] = {}


class QueuedReceiverJob(Job):
    """The job one ``send()`` pushes for one queued receiver."""

    def __init__(self, receiver: str, sender: str | None, kwargs: Annotated[dict[str, Any], Sensitive]) -> None:
        self.receiver = receiver
        self.sender = sender
        self.kwargs = kwargs

    @classmethod
    def display_name(cls, args: Mapping[str, Any]) -> str:
        """The receiver function's import path, not QueuedReceiverJob's."""
        path = args.get("receiver")
        return path if isinstance(path, str) and path else super().display_name(args)

    def handle(self) -> None:
        resolve_receiver(self.receiver)(sender=self.sender, **self.kwargs)


def resolve_receiver(path: str) -> Callable[..., Any]:
    """The function registered by ``@queued_receiver`` as ``path``; raises JobReconstructionError saying
    why it is not (registry.py). Imports nothing."""

    function = _RECEIVERS.get(path)
    if function is not None:
        return function
    raise JobReconstructionError(
        f"queued receiver {path!r} cannot be resolved: "
        f"{registry.why_unresolved(path, 'a function registered by @queued_receiver')}"
    )


class _SignalArgument(Job):
    """Checks one keyword argument under the argument contract, for an error that names it."""

    def __init__(self, value: Any) -> None:
        self.value = value


_PROBE_PREFIX = f"{_SignalArgument.__module__}.{_SignalArgument.__qualname__} argument value"


def _sender_label(sender: Any) -> str | None:
    if sender is None or isinstance(sender, str):
        return sender
    cls = sender if isinstance(sender, type) else type(sender)
    return f"{cls.__module__}.{cls.__qualname__}"


def _checked(path: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    for name, value in kwargs.items():
        try:
            serialize_job(_SignalArgument(value))
        except UnserializableJobError as exc:
            detail = str(exc).removeprefix(_PROBE_PREFIX)
            raise UnserializableJobError(f"queued receiver {path}: signal argument {name!r}{detail}") from None
    return kwargs


def queued_receiver(
    signal: Signal | Sequence[Signal],
    *,
    sender: Any = None,
    connection: str | None = None,
    queue: str = "default",
    delay: object = 0,
    max_attempts: int | None = None,
    on_commit: bool = False,
    using: str = "default",
) -> Callable[[F], F]:
    """Run the decorated module-level function on a worker each time ``signal`` is sent.

    ``connection`` (default: the default connection), ``queue``, ``delay`` and ``max_attempts`` are
    those of the push; with ``on_commit`` the push waits for the transaction on ``using`` to commit.
    They are validated here, at import, before any I/O.
    """
    validate_queue_name(queue)
    validate_delay(delay)
    validate_max_attempts(max_attempts)
    signals = [signal] if isinstance(signal, Signal) else list(signal)

    def decorator(function: F) -> F:
        path = f"{function.__module__}.{function.__qualname__}"
        if "<locals>" in path:
            raise TypeError(f"{path}: a queued receiver must be a module-level function (a worker imports it)")
        _RECEIVERS[path] = function

        def push(sender: Any, signal: Signal | None = None, **kwargs: Any) -> str:

            job = QueuedReceiverJob(path, _sender_label(sender), _checked(path, kwargs))
            target = queues.default() if connection is None else queues[connection]
            prepared = target.prepare(job, delay, queue, max_attempts)
            if on_commit:
                push_after_commit(target, prepared, using=using)
                return prepared.id
            return target.send(prepared)

        for each in signals:
            each.connect(push, sender=sender, weak=False, dispatch_uid=f"kinetis_queue.queued_receiver:{path}")
        return function

    return decorator
