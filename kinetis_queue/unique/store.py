"""The capability interface of unique jobs: what a store keeps under a unique key (the lock and its metadata) and
what a backend implements to keep locks itself (OwnLockStore, LockStore). A leaf below the feature: the SQL
and Redis backends and the Django-database store import this, never the middleware in ``kinetis_queue.unique``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from kinetis_queue.contracts import PreparedPush, Queue, QueuedJob

#: Where an envelope's metadata carries its lock (the scope, the key digest, its generation).
METADATA_KEY: Final = "kinetis_queue.unique"


class Until(StrEnum):
    """How long a unique job's key is held (at most ``unique_for`` seconds in every scope)."""

    #: Until the job's first attempt starts.
    STARTED = "started"
    #: Until the job is acked or fails for good (the default).
    SETTLED = "settled"
    #: For ``unique_for`` seconds, whatever the job does.
    EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class UniqueLock:
    """A unique job's lock: what a store writes at push and what the worker releases."""

    #: 32 hex digits: the connection, the queue and the key, hashed (the key may hold argument values).
    key: str
    until: Until
    #: The lock's lifetime in seconds (``unique_for``).
    seconds: float
    debounce: bool
    #: True: a push finding the key held raises DuplicateJobError instead of returning the holder's id.
    raise_duplicate: bool = False
    #: Raised by one each time a debounced push supersedes a waiting job's message (the Django-database
    #: store); a delivery of an older generation is skipped.
    generation: int = 0

    def metadata(self) -> dict[str, Any]:
        """What the envelope's metadata carries under METADATA_KEY (``held_lock()`` reads it back)."""
        data: dict[str, Any] = {"key": self.key, "until": self.until.value}
        if self.debounce:
            data["debounce"] = True
        if self.generation:
            data["gen"] = self.generation
        return data


@dataclass(frozen=True, slots=True)
class HeldLock:
    """The lock a delivered job names in its metadata (what the worker releases)."""

    key: str
    until: Until
    generation: int
    debounce: bool
    #: The Django database the push's store named (the Django-database store writes it), else None. Checked
    #: against the worker's settings (``store_of()``), never used to choose a database.
    database: str | None = None


#: The scopes as stored in metadata.
UNTIL_VALUES: Final = frozenset(member.value for member in Until)


def held_lock(job: QueuedJob) -> HeldLock | None:
    """The lock a delivered job holds or held, as its metadata says; None for any other job.

    Metadata is read leniently: a job whose lock data is unreadable is treated as not unique (its
    lock, if any, expires by itself), never as a failure. On every delivery's path: one lookup
    for a job that is not unique.
    """
    data = job.metadata.get(METADATA_KEY) if job.metadata else None
    if type(data) is not dict:
        return None
    key, until, generation, debounce = data.get("key"), data.get("until"), data.get("gen", 0), data.get("debounce")
    if type(key) is not str or len(key) != 32 or until not in UNTIL_VALUES or type(generation) is not int:
        return None
    database = data.get("db")
    return HeldLock(key, Until(until), generation, debounce is True, database if type(database) is str else None)


def lock_of(prepared: PreparedPush) -> UniqueLock | None:
    """The lock of a prepared push (UniqueMiddleware's note), or None for a push that is not unique."""
    lock = prepared.notes.get(METADATA_KEY)
    return lock if isinstance(lock, UniqueLock) else None


def without_lock(prepared: PreparedPush) -> PreparedPush:
    """The same push as a plain one (its envelope unchanged): what a lock store sends once it holds the key."""
    notes = {name: value for name, value in prepared.notes.items() if name != METADATA_KEY}
    return replace(prepared, notes=notes)


class OwnLockStore(ABC):
    """The capability of a backend that keeps unique locks in a store of its own (the SQL and Redis backends);
    every other backend's live in the Django database (``database_lock_store()``)."""

    @abstractmethod
    def lock_store(self) -> LockStore:
        """This connection's lock store."""


class LockStore(ABC):
    """Where a connection's unique locks live: the push under a lock, and the worker's releases."""

    #: The Django database alias holding the locks, for a store in a Django database (its pushes name it in
    #: the lock's metadata); None for a backend's own store (SQL, Redis).
    database: str | None = None

    @abstractmethod
    def push(self, queue: Queue, prepared: PreparedPush, lock: UniqueLock) -> str:
        """Store ``prepared`` unless ``lock.key`` is held; the new job's id, or the holder's.

        Raises DuplicateJobError instead of returning the holder's id when ``lock.raise_duplicate``.
        A debounced push finding the holder still waiting replaces its arguments and delay and
        returns its id.
        """

    def started(self, queue: Queue, job: QueuedJob, lock: HeldLock) -> bool:
        """The delivery's attempt is about to start: release a ``"started"`` lock; False when the delivery
        was superseded by a debounced push (the worker then skips it). By default: nothing to do."""
        return True

    def settled(self, queue: Queue, job: QueuedJob, lock: HeldLock) -> None:  # noqa: B027 (an optional hook)
        """The job is about to be acked or failed for good: release its lock if it still holds it.

        Called for a lock of scope ``"settled"`` only (a ``"started"`` lock was released at the start,
        an ``"expired"`` one is never released), before the settlement, so a crash in between leaves
        a duplicate possible, never a key held by a job that is gone. By default: nothing to do (a
        store that derives the lock's validity from the job itself).
        """
