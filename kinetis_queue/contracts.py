"""The queue interface every backend implements, its capabilities, and the delivered job (DESIGN.md §3).

The shared rules live here once: ``push()``, ``pop()``, ``release()``, ``size()`` and ``clear()``
validate their arguments and serialize the job before calling the backend's own primitive, and
``pop()`` runs the contract's sweep-and-pause loop around the backend's non-blocking probe.

A push has two public phases: ``prepare()`` (every check and the serialization, no I/O) returns a
PreparedPush, and ``send()`` stores one. ``push()`` is the two in a row; code that must check a job
now and store it later (``push_on_commit``, the django.tasks backend, queued receivers) calls them
apart. Backends implement the protected ``_push()`` primitive that ``send()`` calls, and add their
own limits through the ``_check_push()`` hook that ``prepare()`` calls.

The batch operations (``push_many()``/``send_many()``, ``pop_many()``, ``ack_many()``) and
``unreserve()`` have defaults built on the single primitives; a backend overrides the protected
``_push_many()``, ``_sweep_many()``, ``_ack_many()`` and ``_unreserve()`` to spend one round trip
where its store allows. Every public operation of a queue may be called from several threads at
once (``queue_work --concurrency``): a backend keeps per-thread what its client cannot share.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Self

from kinetis_queue.exceptions import (
    InvalidQueueArgumentError,
    MalformedJobSettledError,
    StaleJobHandleError,
    UnrunnableJobError,
    UnserializableJobError,
)
from kinetis_queue.job import Job
from kinetis_queue.middleware import PushChain, PushDraft, push_chain
from kinetis_queue.payload.envelope import Envelope, new_envelope
from kinetis_queue.payload.registry import ensure_runnable
from kinetis_queue.payload.serializer import serialize_job
from kinetis_queue.priority import DEFAULT_PRIORITY, priority_of, validate_priority, with_priority
from kinetis_queue.validation import (
    validate_delay,
    validate_job_id,
    validate_max_attempts,
    validate_queue_list,
    validate_queue_name,
    validate_timeout,
)

if TYPE_CHECKING:
    from kinetis_queue.conf import ConnectionSettings
    from kinetis_queue.schema import BackendOptions

#: The keyword options of push() and prepare() that go to the middleware (kinetis_queue.middleware), by name:
#: today those of unique jobs (kinetis_queue.unique.UniqueMiddleware).
_OPTIONS = ("unique_key", "unique_for", "unique_until", "debounce", "on_duplicate")
_NO_OPTIONS: tuple[None, ...] = (None,) * len(_OPTIONS)

#: Longest pause between two empty sweeps (contract: "The pop() priority/timeout contract"); a
#: backend may pause less (``Queue.poll_pause``) or wait natively until a push wakes it (``_wait``).
SWEEP_PAUSE = 1.0


class JobSettlement(StrEnum):
    """The settlement a StaleJobHandleError reports as refused."""

    ACK = "ack"
    RELEASE = "release"
    FAIL = "fail"
    #: Queue.unreserve(): a delivery given back before its attempt started.
    UNRESERVE = "unreserve"


class Withdrawal(StrEnum):
    """What ``Queue.withdraw(job_id)`` found (kinetis_queue.control's ``cancel()`` acts on it)."""

    #: The job was waiting (ready or delayed) and is gone now: no worker will ever run it.
    REMOVED = "removed"
    #: A worker holds the job (running it, or reserved ahead): it is still in the store.
    HELD = "held"
    #: The store holds no job of that id (it finished, failed for good, or never existed).
    ABSENT = "absent"
    #: This store cannot look a job up by its id (Redis, SQS, RabbitMQ): the default.
    UNKNOWN = "unknown"


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

    @property
    def priority(self) -> int:
        """The job's priority within its queue (kinetis_queue.priority), kept across releases; 0 by default."""
        return priority_of(self.metadata)

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
    #: What the push side of the middleware noted for this push, each under a key of its own (the lock of a
    #: unique job, kinetis_queue.unique); carried to their ``send()``, never stored.
    notes: Mapping[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """The job id ``push()`` returns for this job."""
        return self.envelope.id


@dataclass(frozen=True, slots=True)
class StoreRefusal:
    """A push of ``Queue.store_many()`` that the store did not take (the outbox relay reads these).

    ``final``: the store refused it for good (no such queue, too large, an argument it rejects), so
    sending it again cannot succeed: the relay records it as a failed job. Otherwise its outcome is
    a transport error or unknown: the relay keeps it and sends it again.
    """

    #: Its index in the ``prepared`` sequence given to ``store_many()``.
    index: int
    #: Why: the store's error (its message names no argument value).
    error: BaseException
    final: bool


@dataclass(frozen=True, slots=True)
class Reserved:
    """What one ``pop_many()`` reserved: the deliveries in the order a pop() would have returned
    them, and the malformed messages it removed on the way (each one a delivery the worker counts)."""

    jobs: list[QueuedJob] = field(default_factory=list)
    malformed: list[MalformedJobSettledError] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.jobs or self.malformed)


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
    #: Seconds pop() pauses between two empty sweeps (at most SWEEP_PAUSE); a backend whose ``_wait``
    #: is woken by a push still bounds each wait by it, so a delayed job starts within one pause.
    poll_pause: float = SWEEP_PAUSE
    #: True for a backend that runs each job inside push() (sync): no worker ever delivers it.
    runs_inline: ClassVar[bool] = False
    #: Whether the store orders jobs within a queue by priority (kinetis_queue.priority); a push with
    #: a priority other than 0 to a backend that cannot is refused by prepare() (docs/priority.md).
    supports_priority: ClassVar[bool] = False
    #: Most outbox rows one relay transaction sends with ``store_many()`` (kinetis_queue.outbox.relay): a
    #: relay killed mid-batch sends them again, so a store slow to take a batch keeps it small.
    relay_batch: ClassVar[int] = 500

    def __init__(self, *, connection: str | None = None) -> None:
        self.connection = connection
        #: What features attach to this connection when it is built, by the feature's key (the transactional
        #: outbox: kinetis_queue.outbox.outbox_of()). The Queue itself reads nothing here.
        self.features: dict[str, object] = {}
        self._composed: tuple[PushChain, Callable[[Sequence[PreparedPush]], list[str]]] | None = None

    @classmethod
    def from_settings(cls, settings: ConnectionSettings) -> Self:
        """Build the queue for a validated KINETIS_QUEUE connection entry."""
        return cls(connection=settings.name)

    # -- the contract's public operations -------------------------------------------------------

    def push(
        self,
        job: Job,
        delay: object = 0,
        queue: str = "default",
        max_attempts: int | None = None,
        *,
        priority: int | None = None,
        unique_key: str | None = None,
        unique_for: float | None = None,
        unique_until: str | None = None,
        debounce: bool | None = None,
        on_duplicate: str | None = None,
        **options: Any,
    ) -> str:
        """Store ``job`` and return its id; everything is validated and serialized before any I/O.

        The same as ``send(prepare(...))`` with the same arguments. A unique job (the ``unique_*``
        options here or on its class; kinetis_queue.unique) whose key is held is not stored: the
        holder's id is returned (or DuplicateJobError raised, with ``on_duplicate="raise"``).
        ``options`` are those the middleware of KINETIS_QUEUE["MIDDLEWARE"] take (``rate_limit``,
        ``rate_key``...: docs/middleware.md); one no middleware takes is refused.
        """
        return self.send(
            self.prepare(
                job,
                delay,
                queue,
                max_attempts,
                priority=priority,
                unique_key=unique_key,
                unique_for=unique_for,
                unique_until=unique_until,
                debounce=debounce,
                on_duplicate=on_duplicate,
                **options,
            )
        )

    def prepare(
        self,
        job: Job,
        delay: object = 0,
        queue: str = "default",
        max_attempts: int | None = None,
        *,
        priority: int | None = None,
        unique_key: str | None = None,
        unique_for: float | None = None,
        unique_until: str | None = None,
        debounce: bool | None = None,
        on_duplicate: str | None = None,
        **options: Any,
    ) -> PreparedPush:
        """Every check push() makes and the serialization, without I/O: the push ``send()`` stores.

        Raises what push() raises for bad arguments (InvalidQueueArgumentError, UnserializableJobError,
        the backend's own limits); a job no worker could run (no handle(), an uncallable handle(), a
        class defined in ``__main__``, the shell or a function) raises UnrunnableJobError. The
        arguments are serialized now, but lists and dicts may still be shared with the job.

        ``priority`` (None: the job class's ``priority``, 0 unless it sets one) orders the job within
        its queue, -100 to 100, higher first; a backend without ``supports_priority`` refuses any
        other than 0 (kinetis_queue.priority).
        """
        seconds = validate_delay(delay)
        validate_queue_name(queue)
        cap = validate_max_attempts(max_attempts)
        rank = self._priority(job, priority)
        job_class, args = serialize_job(job)
        ensure_runnable(type(job))
        named = (unique_key, unique_for, unique_until, debounce, on_duplicate)
        given: dict[str, object] = {}
        if named != _NO_OPTIONS:
            given = {name: value for name, value in zip(_OPTIONS, named, strict=True) if value is not None}
        if options:
            given.update((name, value) for name, value in options.items() if value is not None)
        draft = PushDraft(self, job, job_class, args, queue, given, self._metadata(), delay=seconds)
        push_chain().prepare(draft)
        metadata = with_priority(draft.metadata, rank)
        prepared = PreparedPush(new_envelope(job_class, args, cap, metadata), seconds, queue, draft.notes)
        self._check_push(prepared)
        return prepared

    def _priority(self, job: Job, priority: int | None) -> int:
        """The push's checked priority: ``priority``, else the job class's; refused where unsupported."""
        if priority is None:
            rank = validate_priority(getattr(type(job), "priority", DEFAULT_PRIORITY), f"{type(job).__name__}.priority")
        else:
            rank = validate_priority(priority)
        if rank != DEFAULT_PRIORITY and not self.supports_priority:
            raise InvalidQueueArgumentError(
                f"the {self.backend_name} backend cannot order jobs within a queue by priority: push with "
                "priority 0, or use a backend that can (docs/priority.md)"
            )
        return rank

    def send(self, prepared: PreparedPush) -> str:
        """Store a prepared push and return its job id; what push() guarantees holds from here on.

        A push that raises may still have been stored when the backend was reached (contract:
        "What push() guarantees"). Sending one PreparedPush twice stores the job twice, under one id,
        unless it is unique: then the connection's lock store decides (the holder's id may come back).
        """
        return self._through_chain()((prepared,))[0]

    def push_many(
        self,
        jobs: Sequence[Job],
        delay: object = 0,
        queue: str = "default",
        max_attempts: int | None = None,
        *,
        priority: int | None = None,
        **options: Any,
    ) -> list[str]:
        """Store every job of ``jobs`` (same delay, queue, attempt cap and priority; None: each job
        class's own) and return their ids in order. ``options`` (the middleware's, as push() takes them)
        apply to every job.

        Every job is checked and serialized before any I/O: one bad job raises the error push()
        would raise, its message starting with the job's index (``jobs[3]: ...``), and nothing is
        stored. Then ``send_many()``: one round trip where the store allows.
        """
        if isinstance(jobs, (str, bytes)) or not isinstance(jobs, Sequence):
            raise InvalidQueueArgumentError("push_many() takes a sequence of jobs (a list or a tuple)")
        prepared = []
        for index, job in enumerate(jobs):
            try:
                prepared.append(self.prepare(job, delay, queue, max_attempts, priority=priority, **options))
            except (InvalidQueueArgumentError, UnserializableJobError, UnrunnableJobError) as exc:
                raise _at_index(exc, index) from exc
        return self.send_many(prepared)

    def send_many(self, prepared: Sequence[PreparedPush]) -> list[str]:
        """Store several prepared pushes and return their ids in order (``send()`` for each, batched).

        Raising part-way, some of them may be stored: each is stored whole or not at all, and one
        that raised may still have been stored (as ``send()``). Nothing is deduplicated, except
        unique jobs: each of those goes through the lock store on its own (``send()``), after the
        others were stored together, and its id is the one ``send()`` returns.
        """
        if not prepared:
            return []
        return self._through_chain()(prepared)

    def _through_chain(self) -> Callable[[Sequence[PreparedPush]], list[str]]:
        """The push chain in front of this queue's store, composed once per chain (a new one when
        KINETIS_QUEUE changes): a push calls one callable, not the chain's making."""
        chain = push_chain()
        composed = self._composed
        if composed is None or composed[0] is not chain:
            composed = self._composed = (chain, chain.compose(self, self._send_to_store))
        return composed[1]

    def _send_to_store(self, prepared: Sequence[PreparedPush]) -> list[str]:
        """The end of the push chain: the backend stores the pushes (one round trip where it can)."""
        if len(prepared) == 1:
            item = prepared[0]
            self._push(item.envelope, item.delay, item.queue)
            return [item.envelope.id]
        self._push_many(prepared)
        return [item.envelope.id for item in prepared]

    def store_many(self, prepared: Sequence[PreparedPush]) -> list[StoreRefusal]:
        """Store prepared pushes in the store itself, now: no outbox, no unique lock (the outbox relay's
        primitive), each delay counted from now (the envelope's pushedAt may be long past). A backend
        may skip here what it recognises as sent already (Redis).

        Returns the pushes that were not stored (StoreRefusal); every other one was. Raising means
        none is known to be stored: the relay sends them all again. This default stores all or raises.
        """
        if prepared:
            self._push_many(prepared)
        return []

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
            if not self._paused(names, deadline):
                return None

    def pop_many(self, timeout: float, queues: Sequence[str], limit: int) -> Reserved:
        """Reserve up to ``limit`` jobs from ``queues`` at once, waiting up to ``timeout`` for the first.

        The deliveries come in the order successive pop() calls would return them (priority = list
        order); each is a delivery of its own, settled on its own. A malformed message met on the way
        is removed and reported in ``Reserved.malformed`` instead of raised, so the deliveries
        reserved with it are not lost. Empty after ``timeout``.
        """
        if type(limit) is not int or limit < 1:
            raise InvalidQueueArgumentError("limit must be an int of 1 or more")
        seconds = validate_timeout(timeout)
        names = validate_queue_list(queues)
        if not names:
            return Reserved()
        deadline = None if seconds == 0 else time.monotonic() + seconds
        while True:
            found = self._sweep_many(names, limit)
            if found:
                return found
            if not self._paused(names, deadline):
                return found

    def _paused(self, names: tuple[str, ...], deadline: float | None) -> bool:
        """Wait once between two empty sweeps; False when the deadline has passed instead."""
        pause = min(self.poll_pause, SWEEP_PAUSE)
        if deadline is None:
            self._wait(names, pause)
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        self._wait(names, min(pause, left))
        return True

    @abstractmethod
    def ack(self, job: QueuedJob) -> None:
        """Settle a delivery whose handler returned: the job is gone."""

    def ack_many(self, jobs: Sequence[QueuedJob]) -> list[StaleJobHandleError | None]:
        """Ack several deliveries; one result per job, in order: None when acked, the refusal when stale.

        Each ack is fenced as ack() is; a refusal is reported, never raised. Any other error
        propagates, and then some of the deliveries may have been acked (each wholly or not at all).
        """
        return self._ack_many(jobs) if jobs else []

    def release(self, job: QueuedJob, delay: float = 0) -> None:
        """Put a delivery back for another attempt, poppable after at least ``delay`` seconds."""
        self._release(job, validate_delay(delay))

    def unreserve(self, job: QueuedJob, delay: float = 0) -> None:
        """Give back a delivery whose attempt never started (reserved ahead, or held back at its
        concurrency limit), poppable again after ``delay`` seconds.

        Its next delivery carries the same attempt number: no attempt is charged. With no delay it is
        poppable at once, ahead of the jobs waiting where the store allows. Fenced like a release:
        StaleJobHandleError(UNRESERVE) when the delivery is no longer held, and nothing is written.
        """
        self._unreserve(job, validate_delay(delay))

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

    def withdraw(self, job_id: str) -> Withdrawal:
        """Remove the job ``job_id`` if it is waiting, and say what was found (``cancel()``'s store step).

        The id is checked first (32 lowercase hex digits, what push() returns), before any I/O. A store
        that can find a job by its id deletes a waiting one (REMOVED) and leaves a reserved one alone
        (HELD); one that cannot answers UNKNOWN, the default. Never touches a reserved delivery.
        """
        return self._withdraw(validate_job_id(job_id))

    def withdraw_many(self, job_ids: Sequence[str]) -> dict[str, Withdrawal]:
        """``withdraw()`` for several jobs at once (a workflow's cancel): what was found, per id.

        Every id is checked first, before any I/O. A store that can look jobs up does it in a fixed
        number of statements whatever the count (the SQL backend: one read of the jobs table).
        """
        ids = list(dict.fromkeys(validate_job_id(job_id) for job_id in job_ids))
        return self._withdraw_many(ids) if ids else {}

    def jobs_database(self) -> str | None:
        """The Django database alias this backend keeps its jobs in (the SQL backend's), else None."""
        return None

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

    def _push_many(self, prepared: Sequence[PreparedPush]) -> None:
        """Store several prepared pushes (``send_many()``'s primitive); by default one ``_push()`` each."""
        for item in prepared:
            self._push(item.envelope, item.delay, item.queue)

    @abstractmethod
    def _sweep(self, queues: tuple[str, ...]) -> QueuedJob | None:
        """One non-blocking, reserving probe of ``queues`` in priority order."""

    def _sweep_many(self, queues: tuple[str, ...], limit: int) -> Reserved:
        """One non-blocking probe reserving up to ``limit`` jobs; by default one ``_sweep()``."""
        try:
            found = self._sweep(queues)
        except MalformedJobSettledError as exc:
            return Reserved(malformed=[exc])
        return Reserved(jobs=[] if found is None else [found])

    def _wait(self, queues: tuple[str, ...], seconds: float) -> None:
        """Pause between empty sweeps; a backend with a native wait (woken by a push) overrides this."""
        time.sleep(seconds)

    def _withdraw(self, job_id: str) -> Withdrawal:
        """``withdraw()``'s primitive for a checked id; by default the store cannot look a job up."""
        return Withdrawal.UNKNOWN

    def _withdraw_many(self, job_ids: list[str]) -> dict[str, Withdrawal]:
        """``withdraw_many()``'s primitive for checked, distinct ids; by default one ``_withdraw()`` each."""
        return {job_id: self._withdraw(job_id) for job_id in job_ids}

    def _ack_many(self, jobs: Sequence[QueuedJob]) -> list[StaleJobHandleError | None]:
        """Ack each job (``ack_many()``'s primitive); by default one ``ack()`` each."""
        results: list[StaleJobHandleError | None] = []
        for job in jobs:
            try:
                self.ack(job)
            except StaleJobHandleError as stale:
                results.append(stale)
            else:
                results.append(None)
        return results

    def _unreserve(self, job: QueuedJob, delay: float) -> None:
        """Give back an unstarted delivery (``delay`` validated); by default a release, which charges the
        attempt anyway: each shipped backend overrides it, and a custom backend should."""
        self._release(job, delay)

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


def _at_index(exc: Exception, index: int) -> Exception:
    """The same error for the job at ``index`` of a push_many(): its message starts with ``jobs[index]: ``."""
    renamed = type(exc).__new__(type(exc))
    renamed.args = (f"jobs[{index}]: {exc}",)
    renamed.__dict__.update(getattr(exc, "__dict__", {}))
    return renamed
