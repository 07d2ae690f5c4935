"""The queue interface every backend implements, its capabilities, and the delivered job (DESIGN.md §3).

The shared rules live here once: ``push()``, ``pop()``, ``release()``, ``size()`` and ``clear()``
validate their arguments and serialize the job before calling the backend's own primitive, and
``pop()`` runs the contract's sweep-and-pause loop around the backend's non-blocking probe.

A push has two public phases: ``prepare()`` (every check and the serialization, no I/O) returns a
PreparedPush, and ``send()`` stores one. ``push()`` is the two in a row; code that must check a job
now and store it later (``push_on_commit``, the django.tasks backend, queued receivers) calls them
apart. Backends implement the protected ``_push()`` primitive that ``send()`` calls, and add their
own limits through the ``_check_push()`` hook that ``prepare()`` calls.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Self

from kinetis_queue.envelope import Envelope, new_envelope
from kinetis_queue.job import Job
from kinetis_queue.registry import ensure_runnable
from kinetis_queue.serializer import serialize_job
from kinetis_queue.validation import (
    validate_delay,
    validate_max_attempts,
    validate_queue_list,
    validate_queue_name,
    validate_timeout,
)

if TYPE_CHECKING:
    from kinetis_queue.conf import ConnectionSettings
    from kinetis_queue.schema import BackendOptions

#: Longest pause between two empty sweeps (contract: "The pop() priority/timeout contract").
SWEEP_PAUSE = 1.0


class JobSettlement(StrEnum):
    """The settlement a StaleJobHandleError reports as refused."""

    ACK = "ack"
    RELEASE = "release"
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """One delivery of a job: what the worker runs, plus the receipt (``handle``) that settles it."""

    id: str
    queue: str
    job_class: str
    args: dict[str, Any]
    attempts: int
    max_attempts: int | None
    pushed_at: datetime
    metadata: dict[str, Any] = field(default_factory=dict)
    handle: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        validate_queue_name(self.queue)

    @classmethod
    def delivered(cls, envelope: Envelope, queue: str, handle: Any) -> QueuedJob:
        """The delivery of a decoded ``envelope`` popped from ``queue``, settled through ``handle``.

        Every backend builds its deliveries here: ``attempts`` is the stored count of completed
        attempts plus this one, and ``pushed_at`` the stored Unix time as an aware UTC datetime.
        """
        return cls(
            id=envelope.id,
            queue=queue,
            job_class=envelope.job_class,
            args=envelope.args,
            attempts=envelope.attempts + 1,
            max_attempts=envelope.max_attempts,
            pushed_at=envelope.pushed_at_datetime(),
            metadata=envelope.metadata,
            handle=handle,
        )


@dataclass(frozen=True, slots=True)
class PreparedPush:
    """A push checked and serialized by ``Queue.prepare()``, not yet sent: ``Queue.send()`` stores it.

    It holds no connection and may be sent later (after a commit) or not at all. Built directly,
    it is sent as it is, unchecked: that is for storing again an envelope that was already
    checked once, such as the replacement of a delivered job (same id, attempts starting over).
    """

    envelope: Envelope
    #: Seconds before the job may be popped, already validated (0: at once).
    delay: float
    queue: str

    @property
    def id(self) -> str:
        """The job id ``push()`` returns for this job."""
        return self.envelope.id


@dataclass(frozen=True, slots=True)
class QueueStats:
    """Point-in-time figures for one queue (``queue_status``); None where the backend cannot tell.

    ``waiting`` is ``size()``. ``ready``: poppable now (an expired reservation counts, since the
    next pop() reclaims it); ``delayed``: inside a push or release delay; ``reserved``: live
    reservations. ``approximate`` is True where the backend reports estimates (SQS) or reads the
    parts separately rather than at one instant (RabbitMQ).
    """

    waiting: int
    ready: int | None = None
    delayed: int | None = None
    reserved: int | None = None
    approximate: bool = False


class Queue(ABC):
    """A queue connection. Subclasses implement the primitives; the contract's rules are applied here."""

    #: The backend's short name, used in messages ("sql", "redis", ...).
    backend_name: ClassVar[str] = "custom"
    #: The connection keys this backend takes besides BACKEND and the shared ones (schema.py), checked by
    #: conf.py; ``from_settings`` then finds every one in ``settings.options``, defaults filled in. None
    #: (a custom backend's default): any key is accepted and ``settings.options`` is the entry as written.
    settings_schema: ClassVar[BackendOptions | None] = None

    def __init__(self, *, connection: str | None = None) -> None:
        self.connection = connection

    @classmethod
    def from_settings(cls, settings: ConnectionSettings) -> Self:
        """Build the queue for a validated KINETIS_QUEUE connection entry."""
        return cls(connection=settings.name)

    # -- the contract's public operations -------------------------------------------------------

    def push(self, job: Job, delay: object = 0, queue: str = "default", max_attempts: int | None = None) -> str:
        """Store ``job`` and return its id; everything is validated and serialized before any I/O.

        The same as ``send(prepare(job, delay, queue, max_attempts))``.
        """
        return self.send(self.prepare(job, delay, queue, max_attempts))

    def prepare(
        self, job: Job, delay: object = 0, queue: str = "default", max_attempts: int | None = None
    ) -> PreparedPush:
        """Every check push() makes and the serialization, without I/O: the push ``send()`` stores.

        Raises what push() raises for bad arguments (InvalidQueueArgumentError, UnserializableJobError,
        the backend's own limits); a job no worker could run (no handle(), an uncallable handle(), a
        class defined in ``__main__``, the shell or a function) raises UnrunnableJobError. The
        arguments are serialized now, but lists and dicts may still be shared with the job.
        """
        seconds = validate_delay(delay)
        validate_queue_name(queue)
        cap = validate_max_attempts(max_attempts)
        job_class, args = serialize_job(job)
        ensure_runnable(type(job))
        prepared = PreparedPush(new_envelope(job_class, args, cap, self._metadata()), seconds, queue)
        self._check_push(prepared)
        return prepared

    def send(self, prepared: PreparedPush) -> str:
        """Store a prepared push and return its job id; what push() guarantees holds from here on.

        A push that raises may still have been stored when the backend was reached (contract:
        "What push() guarantees"). Sending one PreparedPush twice stores the job twice, under one id.
        """
        self._push(prepared.envelope, prepared.delay, prepared.queue)
        return prepared.envelope.id

    def pop(self, timeout: float, queues: Sequence[str]) -> QueuedJob | None:
        """Reserve the next job from ``queues`` (priority = list order), waiting up to ``timeout``."""
        seconds = validate_timeout(timeout)
        names = validate_queue_list(queues)
        if not names:
            return None
        deadline = None if seconds == 0 else time.monotonic() + seconds
        while True:
            found = self._sweep(names)
            if found is not None:
                return found
            if deadline is None:
                self._wait(names, SWEEP_PAUSE)
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._wait(names, min(SWEEP_PAUSE, left))

    @abstractmethod
    def ack(self, job: QueuedJob) -> None:
        """Settle a delivery whose handler returned: the job is gone."""

    def release(self, job: QueuedJob, delay: float = 0) -> None:
        """Put a delivery back for another attempt, poppable after at least ``delay`` seconds."""
        self._release(job, validate_delay(delay))

    @abstractmethod
    def fail(self, job: QueuedJob) -> None:
        """Settle a delivery the worker gave up on: the job is gone from the backend."""

    def size(self, queue: str) -> int:
        """Waiting work on ``queue``: a monitoring signal, not a value to branch on."""
        return self._size(validate_queue_name(queue))

    def stats(self, queue: str) -> QueueStats:
        """Figures for ``queue_status``: a monitoring snapshot that never decodes a payload."""
        return self._stats(validate_queue_name(queue))

    def queue_names(self) -> list[str] | None:
        """Queues that hold jobs now, for ``queue_status`` without ``--queue``; None: cannot list."""
        return None

    def queue_known(self, queue: str) -> bool | None:
        """Whether the store knows ``queue`` (``queue_work``'s start-up note on a likely typo).

        By default: whether ``queue_names()`` lists it now (a queue whose jobs were all settled is
        not listed); a store that names its queues (SQS: the queue exists; RabbitMQ: it is
        declared) overrides this. None: the store cannot tell. Creates nothing.
        """
        names = self.queue_names()
        return None if names is None else validate_queue_name(queue) in names

    # -- what each backend provides --------------------------------------------------------------

    def _metadata(self) -> dict[str, Any]:
        """Metadata carried on every envelope (propagation data); empty by default."""
        return {}

    def _check_push(self, prepared: PreparedPush) -> None:
        """The backend's own limits on a prepared push (a delay ceiling, a message size); no I/O.

        Called last by ``prepare()``, after the contract's checks; raise InvalidQueueArgumentError.
        """
        return None  # the contract's own checks are all a backend needs unless it overrides this

    @abstractmethod
    def _push(self, envelope: Envelope, delay: float, queue: str) -> None:
        """Store a validated envelope (``send()``'s primitive): the push's first and only I/O."""

    @abstractmethod
    def _sweep(self, queues: tuple[str, ...]) -> QueuedJob | None:
        """One non-blocking, reserving probe of ``queues`` in priority order."""

    def _wait(self, queues: tuple[str, ...], seconds: float) -> None:
        """Pause between empty sweeps; a backend with a native wait overrides this."""
        time.sleep(seconds)

    @abstractmethod
    def _release(self, job: QueuedJob, delay: float) -> None:
        """Release with an already validated delay."""

    @abstractmethod
    def _size(self, queue: str) -> int:
        """Count waiting work on a validated queue name."""

    def _stats(self, queue: str) -> QueueStats:
        """Figures for a validated queue name; a backend that can split size() overrides this."""
        return QueueStats(waiting=self._size(queue))


class ClearableQueue(Queue):
    """A backend that can discard every unreserved job on a queue."""

    def clear(self, queue: str) -> int:
        """Discard every unreserved job on ``queue`` (delayed ones included); return how many."""
        return self._clear(validate_queue_name(queue))

    @abstractmethod
    def _clear(self, queue: str) -> int:
        """Clear a validated queue name."""


class RenewableQueue(Queue):
    """A backend whose reservations expire and can be extended by the worker while a job runs."""

    @abstractmethod
    def visibility_timeout(self) -> int:
        """Seconds a reservation lasts without renewal."""

    @abstractmethod
    def renew(self, job: QueuedJob) -> None:
        """Extend the delivery's reservation by a full window; settles nothing, reports nothing."""


class DisposableQueue(Queue):
    """A backend that owns a connection and closes it in ``dispose()`` (idempotent)."""

    @abstractmethod
    def dispose(self) -> None:
        """Close what this queue opened; safe before first use and when called twice."""
