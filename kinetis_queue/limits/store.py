"""The capability interface of concurrency limits: a Job class's limit, a slot, where a connection keeps its
slots (SlotStore), and what a backend implements to keep them itself (OwnSlotStore, OwnSlotLease). A leaf below
the feature: the Redis and RabbitMQ backends and the Django-database store import this, never
``kinetis_queue.limits``."""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from kinetis_queue.exceptions import InvalidQueueArgumentError
from kinetis_queue.job import Job, job_class_path

#: The longest key a job may give (characters): it is hashed, never stored as written.
MAX_KEY_LENGTH: Final = 1000


@dataclass(frozen=True, slots=True)
class ConcurrencyLimit:
    """A Job class's limit: how its jobs' key is found, how many may run at once, the give-back delay."""

    key: str | Callable[[Any], str]
    max: int
    delay: float

    def key_of(self, job: Job) -> str:
        """The job's key as written: a string key as it is (the classes naming it share its slots), a
        callable's result after the class path (so two classes' keys never meet by accident)."""
        if isinstance(self.key, str):
            return self.key
        try:
            value = self.key(job)
        except Exception as exc:  # its message may hold argument values: only the type is shown
            raise InvalidQueueArgumentError(
                f"the concurrency key of {job_class_path(type(job))} raised {type(exc).__name__}"
            ) from None
        if type(value) is not str or not 0 < len(value) <= MAX_KEY_LENGTH:
            raise InvalidQueueArgumentError(
                f"the concurrency key of {job_class_path(type(job))} must be a non-empty str of at most "
                f"{MAX_KEY_LENGTH} characters"
            )
        return f"{job_class_path(type(job))}\0{value}"


def slot_key(connection: str | None, key: str) -> str:
    """The slot key a store writes: 32 hex digits of the connection's name and the key."""
    return hashlib.sha256(f"kinetis_queue.limit\0{connection or ''}\0{key}".encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Slot:
    """One slot a delivery holds: its key, its number where the store numbers them, and the holder's token."""

    key: str
    number: int
    token: str


class SlotStore(ABC):
    """Where a connection's concurrency slots live: take one, renew it, give it back (each fenced by token)."""

    @abstractmethod
    def acquire(self, key: str, limit: int, token: str, lease: float) -> Slot | None:
        """Take a free slot of ``key`` (fewer than ``limit`` held, expired ones free) for ``lease`` seconds;
        None when all are held."""

    @abstractmethod
    def renew(self, slot: Slot, lease: float) -> None:
        """Hold ``slot`` for ``lease`` more seconds, if its token still holds it."""

    @abstractmethod
    def release(self, slot: Slot) -> None:
        """Give ``slot`` back, if its token still holds it."""


class OwnSlotStore(ABC):
    """The capability of a backend that keeps concurrency slots in a store of its own (the Redis backend);
    every other backend's are rows in a Django database (kinetis_queue.limits.database)."""

    @abstractmethod
    def slot_store(self) -> SlotStore:
        """This connection's slot store."""


class OwnSlotLease(ABC):
    """The capability of a backend that says how long a slot is leased for itself (RabbitMQ: no visibility
    timeout for a slot to follow)."""

    @abstractmethod
    def slot_lease(self) -> float:
        """Seconds a slot is leased for before it must be renewed."""
