"""Unique jobs: at most one job per key held at a time on a connection (docs/unique-jobs.md).

A job is unique when its class sets ``unique_for`` (seconds) or its push names ``unique_key=`` /
``unique_for=``. ``UniqueMiddleware`` (kinetis_queue.middleware) turns that into a ``UniqueLock`` (key
digest, scope, lifetime, debounce) when the push is prepared, carried in the envelope's metadata under
METADATA_KEY so the worker can release it; the push then goes through the connection's ``LockStore``,
which writes the lock and the job together (or, where it cannot, in an order that never loses a job) and
returns the holder's id when the key is held.

The scopes (``unique_until``): ``"settled"`` (default) holds the key until the job is acked or fails
for good; ``"started"`` until its first attempt starts; ``"expired"`` for ``unique_for`` seconds
whatever happens. In every scope the lock lasts at most ``unique_for`` seconds. ``debounce`` (scope
``"started"``): a push while the holder waits replaces its arguments and delay, keeping its id.

Nothing here touches a store: each backend brings its own LockStore (the SQL and Redis backends)
or uses the Django database's (SQS, RabbitMQ, sync and custom backends: kinetis_queue.unique.database),
which needs the app installed and Django's app registry ready.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from kinetis_queue.exceptions import InvalidQueueArgumentError, UnknownLockDatabaseError
from kinetis_queue.job import Job, job_class_path
from kinetis_queue.middleware import Middleware, PushDraft, Store, app_loaded
from kinetis_queue.outbox import outbox_of
from kinetis_queue.outcomes import SkipDelivery, WillNeverRun
from kinetis_queue.unique.store import METADATA_KEY as METADATA_KEY
from kinetis_queue.unique.store import UNTIL_VALUES
from kinetis_queue.unique.store import HeldLock as HeldLock
from kinetis_queue.unique.store import LockStore as LockStore
from kinetis_queue.unique.store import OwnLockStore as OwnLockStore
from kinetis_queue.unique.store import UniqueLock as UniqueLock
from kinetis_queue.unique.store import Until as Until
from kinetis_queue.unique.store import held_lock as held_lock
from kinetis_queue.unique.store import lock_of as lock_of
from kinetis_queue.unique.store import without_lock as without_lock

if TYPE_CHECKING:
    from collections.abc import Sequence

    from kinetis_queue.contracts import PreparedPush, Queue, QueuedJob

#: The longest ``unique_for``, in seconds (30 days).
MAX_UNIQUE_FOR: Final = 30 * 86_400
#: The longest ``unique_key`` a job may give (characters): it is hashed, never stored as written.
MAX_KEY_LENGTH: Final = 1000
#: What a push whose key is held does: return the holder's id, or raise DuplicateJobError.
ON_DUPLICATE = ("return", "raise")


class UniqueMiddleware(Middleware):
    """Unique jobs in the chain. On the push side the lock of a push is made when it is prepared (its options
    checked, its key hashed), and a push holding one is sent through the connection's lock store; around a
    worker's deliveries the key is freed when the job starts or settles, as its scope says."""

    options = frozenset({"unique_key", "unique_for", "unique_until", "debounce", "on_duplicate"})

    #: The worker's queue (set by ``start()``): its connection's lock store frees the keys.
    queue: Queue

    def prepare(self, draft: PushDraft) -> None:
        options = draft.options
        job = draft.job
        if type(job).unique_for is None and (not options or self.options.isdisjoint(options)):
            return  # not unique: one attribute read
        lock = lock_for(
            job,
            draft.job_class,
            draft.args,
            draft.queue.connection,
            draft.queue_name,
            options.get("unique_key"),
            options.get("unique_for"),
            options.get("unique_until"),
            options.get("debounce"),
            options.get("on_duplicate"),
        )
        draft.metadata[METADATA_KEY] = lock.metadata()
        draft.notes[METADATA_KEY] = lock

    # -- around a worker's deliveries: the key's start and its release ------------------------------------------

    def start(self, queue: Queue) -> None:
        self.queue = queue

    def claim(self, job: QueuedJob, instance: Job) -> None:
        """A unique job's start: scope "started" frees its key; a delivery a debounced push superseded is skipped."""
        held = held_lock(job)
        if held is not None and not store_of(self.queue, held).started(self.queue, job, held):
            raise Superseded

    def succeeding(self, job: QueuedJob) -> None:
        self._release(job)

    def failing(self, job: QueuedJob) -> None:
        self._release(job)

    def skipped(self, job: QueuedJob, skipped: SkipDelivery) -> None:
        """A delivery skipped because a model it names is gone never started and never will: its key is freed,
        scope "started" or "settled" (a cancellation frees its own; a superseded one is not the holder)."""
        if isinstance(skipped, WillNeverRun):  # its model gone, expired
            free_key(self.queue, job, _releasing_store)

    def _release(self, job: QueuedJob) -> None:
        """Free a unique job's key before its ack or final failure (scope "settled").

        Before, not after: a crash in between leaves a duplicate possible, never a key held by a finished job.
        An error of the lock store propagates and nothing is settled, as a failed-job record's.
        """
        held = held_lock(job)
        if held is not None and held.until is Until.SETTLED:
            store = _releasing_store(self.queue, held)
            if store is not None:
                store.settled(self.queue, job, held)

    def send(self, queue: Queue, prepared: Sequence[PreparedPush], store: Store) -> list[str]:
        """The pushes without a lock go on together; then each unique one through the lock store, whose answer
        (the holder's id when its key is held) is its id."""
        if len(prepared) == 1 and METADATA_KEY not in prepared[0].notes:  # one push, not unique: the usual case
            return store(prepared)
        plain = [item for item in prepared if METADATA_KEY not in item.notes]
        if len(plain) == len(prepared):
            return store(prepared)
        if plain:
            store(plain)
        return [item.id if (lock := lock_of(item)) is None else connection_store(queue).push(queue, item, lock)
                for item in prepared]  # fmt: skip


def lock_store_of(queue: Queue) -> LockStore:
    """Where ``queue``'s unique locks live: the backend's own store, else the Django database's."""
    return queue.lock_store() if isinstance(queue, OwnLockStore) else database_lock_store(queue, None)


def database_lock_store(queue: Queue, database: str | None) -> LockStore:
    """The lock store in a Django database (None: the one the router names), which the app provides: the store
    of backends without one of their own, and of every push made through an outbox."""
    if not app_loaded():
        raise InvalidQueueArgumentError(
            f"unique jobs on the {queue.backend_name} backend keep their locks in the Django database: "
            "add 'kinetis_queue' to INSTALLED_APPS"
        )
    from kinetis_queue.unique.database import database_locks  # plug-in point: its models load with the app

    return database_locks(database)


def connection_store(queue: Queue) -> LockStore:
    """Where the worker's settings keep ``queue``'s unique locks: with an outbox (OUTBOX), the store in the
    outbox's database, so a push in a transaction takes its key in that transaction and a push outside one
    meets the same keys; else the backend's own store (or the Django database's, for backends without one).
    The push takes its key there (``Queue.send()``) and the worker frees it there (``store_of()``)."""
    outbox = outbox_of(queue)
    return lock_store_of(queue) if outbox is None else database_lock_store(queue, outbox.database)


def store_of(queue: Queue, lock: HeldLock) -> LockStore:
    """The store holding a delivered job's lock: the connection's (``connection_store()``), from the worker's
    settings, never a database the job's metadata names.

    Raises UnknownLockDatabaseError when the metadata names a database and it is not that store's (an alias
    renamed or removed since the push, a changed OUTBOX or router, or metadata kinetis_queue did not write):
    the job's own failure, recorded, as nothing can free that lock here. A lock naming no database (the SQL
    and Redis stores write none) is the connection's store's.
    """
    store = connection_store(queue)
    if lock.database is not None and lock.database != store.database:
        raise UnknownLockDatabaseError(lock.database, store.database, queue.connection)
    return store


class Superseded(SkipDelivery):
    """Raised by the worker in place of a delivery's attempt when a debounced push superseded it:
    the delivery is acked without running (JobOutcome.SKIPPED)."""

    def __init__(self) -> None:
        super().__init__("a newer push of its unique key superseded it")


def lock_for(
    job: Job,
    job_class: str,
    args: Mapping[str, Any],
    connection: str | None,
    queue: str,
    unique_key: object = None,
    unique_for: object = None,
    unique_until: object = None,
    debounce: object = None,
    on_duplicate: object = None,
) -> UniqueLock:
    """The lock of a push, from the push's own options and then the job class's. Called when the job class
    sets unique_for or the push passes one of these options (push() skips it otherwise, so a job that is
    not unique costs nothing here).

    Everything is checked here, before any I/O, and each error names the option, never a value.
    """
    cls = type(job)
    seconds: Any = unique_for if unique_for is not None else getattr(cls, "unique_for", None)
    if seconds is None:  # then some other option was given
        given = [
            name for name, value in _options(unique_key, unique_until, debounce, on_duplicate) if value is not None
        ]
        raise InvalidQueueArgumentError(
            f"{given[0]} needs unique_for (seconds): pass it, or set unique_for on {job_class_path(cls)}"
        )
    if type(seconds) not in (int, float) or not math.isfinite(seconds) or not 0 < seconds <= MAX_UNIQUE_FOR:
        raise InvalidQueueArgumentError(f"unique_for must be a number of seconds above 0, at most {MAX_UNIQUE_FOR}")
    until = _choice(unique_until, getattr(cls, "unique_until", Until.SETTLED.value), "unique_until", UNTIL_VALUES)
    wants_debounce = _flag(debounce, getattr(cls, "unique_debounce", False), "debounce")
    if wants_debounce and until != Until.STARTED:
        raise InvalidQueueArgumentError(
            "debounce needs unique_until='started': a waiting job is replaced, a started one is not"
        )
    duplicate = _choice(on_duplicate, getattr(cls, "unique_on_duplicate", "return"), "on_duplicate", ON_DUPLICATE)
    key = _key(job, job_class, args, unique_key)
    return UniqueLock(
        digest(connection, queue, key), Until(until), float(seconds), wants_debounce, duplicate == "raise"
    )


def _options(
    unique_key: object, unique_until: object, debounce: object, on_duplicate: object
) -> list[tuple[str, object]]:
    return [
        ("unique_key", unique_key),
        ("unique_until", unique_until),
        ("debounce", debounce),
        ("on_duplicate", on_duplicate),
    ]


def class_problem(cls: type[Job]) -> str | None:
    """What is wrong with a Job class's unique_* attributes (``manage.py check`` E007), or None.

    The same rules a push applies to them, checked without a job: a class whose push would be refused
    for them is reported at start-up instead.
    """
    options = ("unique_for", "unique_until", "unique_debounce", "unique_on_duplicate")
    if all(getattr(cls, name) == getattr(Job, name) for name in options):
        return None
    seconds = cls.unique_for
    if seconds is None:
        return f"{job_class_path(cls)} sets unique_* attributes without unique_for (seconds)"
    try:
        if type(seconds) not in (int, float) or not math.isfinite(seconds) or not 0 < seconds <= MAX_UNIQUE_FOR:
            raise InvalidQueueArgumentError(f"unique_for must be a number of seconds above 0, at most {MAX_UNIQUE_FOR}")
        until = _choice(None, cls.unique_until, "unique_until", UNTIL_VALUES)
        if _flag(None, cls.unique_debounce, "unique_debounce") and until != Until.STARTED:
            raise InvalidQueueArgumentError("unique_debounce needs unique_until='started'")
        _choice(None, cls.unique_on_duplicate, "unique_on_duplicate", ON_DUPLICATE)
    except InvalidQueueArgumentError as exc:
        return f"{job_class_path(cls)}: {exc}"
    return None


def digest(connection: str | None, queue: str, key: str) -> str:
    """The lock key a store writes: 32 hex digits of the connection's name, the queue and the key."""
    return hashlib.sha256(f"kinetis_queue.unique\0{connection or ''}\0{queue}\0{key}".encode()).hexdigest()[:32]


def default_key(job_class: str, args: Mapping[str, Any]) -> str:
    """The key of a job that names none: its class and its stored arguments (canonical JSON)."""
    return job_class + "\0" + json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _key(job: Job, job_class: str, args: Mapping[str, Any], given: object) -> str:
    if given is None:
        method = getattr(type(job), "unique_key", None)
        if method is None:
            return default_key(job_class, args)
        try:
            given = job.unique_key()  # type: ignore[attr-defined]
        except Exception as exc:  # its message may hold argument values: only the type is shown
            raise InvalidQueueArgumentError(f"{job_class}.unique_key() raised {type(exc).__name__}") from None
        where = f"{job_class}.unique_key()"
    else:
        where = "unique_key"
    if type(given) is not str or not 0 < len(given) <= MAX_KEY_LENGTH:
        raise InvalidQueueArgumentError(f"{where} must be a non-empty str of at most {MAX_KEY_LENGTH} characters")
    return job_class + "\0" + given


def _choice(given: object, default: object, name: str, allowed: frozenset[str] | tuple[str, ...]) -> str:
    value = default if given is None else given
    if not isinstance(value, str) or value not in allowed:
        raise InvalidQueueArgumentError(f"{name} must be one of {', '.join(map(repr, sorted(allowed)))}")
    return str(value)


def _flag(given: object, default: object, name: str) -> bool:
    value = default if given is None else given
    if type(value) is not bool:
        raise InvalidQueueArgumentError(f"{name} must be True or False")
    return value


def free_key(
    queue: Queue, job: QueuedJob, store_for: Callable[[Queue, HeldLock], LockStore | None] | None = None
) -> None:
    """Free the key of a job that will never start nor settle (skipped, cancelled, refused for good by its store)
    as its first attempt (scope "started") or its settlement ("settled") would have; scope "expired" keeps it to
    the end of ``unique_for``. The one place that does it: the worker's skip, a cancellation and the outbox relay.

    ``store_for``: where the lock is (default ``store_of()``); None from it leaves the key to expire. The stores
    fence the release on the job's id and generation; an error of the store propagates to the caller.
    """
    held = held_lock(job)
    if held is None or held.until is Until.EXPIRED:
        return
    store = (store_for or store_of)(queue, held)
    if store is None:
        return
    if held.until is Until.STARTED:
        store.started(queue, job, held)
    else:
        store.settled(queue, job, held)


def _releasing_store(queue: Queue, held: HeldLock) -> LockStore | None:
    """The store to free ``held`` in, or None when its lock names a database the worker's settings do not give
    the connection: nothing here can free it (it frees itself at ``unique_for``), and the settlement goes on,
    so a job that ran is never run again for a lock it cannot free (its start fails such a job first)."""
    try:
        return store_of(queue, held)
    except UnknownLockDatabaseError:
        return None
