"""Concurrency limits per key: at most N jobs of one key run at once across every worker (docs/limits.md).

``@limit_concurrency(key=..., max=N)`` on a Job class. Before a delivery's attempt starts, the worker
takes one of the key's N slots from the connection's ``SlotStore``; when all are taken, it gives the
delivery back with ``Queue.unreserve(job, delay)``, which charges no attempt, and it comes back after
the delay. A slot is a lease: held for ``lease`` seconds, renewed while the job runs, given back when
the attempt ends, and free again by itself once a crashed worker stops renewing it.

The key is read from the rebuilt job (a string, or a callable of the job), so it never travels in
the message and a deploy that changes ``max`` applies to every waiting job.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

from kinetis_queue.contracts import RenewableQueue
from kinetis_queue.exceptions import InvalidQueueArgumentError
from kinetis_queue.job import Job, job_class_path
from kinetis_queue.limits.store import MAX_KEY_LENGTH as MAX_KEY_LENGTH
from kinetis_queue.limits.store import ConcurrencyLimit as ConcurrencyLimit
from kinetis_queue.limits.store import OwnSlotLease as OwnSlotLease
from kinetis_queue.limits.store import OwnSlotStore as OwnSlotStore
from kinetis_queue.limits.store import Slot as Slot
from kinetis_queue.limits.store import SlotStore as SlotStore
from kinetis_queue.limits.store import slot_key as slot_key
from kinetis_queue.middleware import app_loaded
from kinetis_queue.outcomes import STORE_FAILURE_DELAY as STORE_FAILURE_DELAY  # re-exported: its home is outcomes
from kinetis_queue.outcomes import AtLimit as AtLimit  # re-exported: its home is outcomes
from kinetis_queue.validation import MAX_RETRY_DELAY

if TYPE_CHECKING:
    from kinetis_queue.contracts import Queue

#: The largest ``max`` (slots are rows or set members: keep them few).
MAX_SLOTS: Final = 1000
#: Seconds a delivery given back at its limit waits by default before it may be popped again.
DEFAULT_DELAY: Final = 1.0
#: A slot's lease on a backend without a visibility timeout (RabbitMQ), in seconds.
DEFAULT_LEASE: Final = 60

J = TypeVar("J", bound=type[Job])


def limit_concurrency(
    *, key: str | Callable[[Any], str] | None = None, max: int, delay: float = DEFAULT_DELAY
) -> Callable[[J], J]:
    """Class decorator: at most ``max`` jobs of one ``key`` run at once on the connection, across workers.

    ``key`` is a string (every job of the class shares it; two classes naming the same string share
    their slots) or a callable taking the job and returning a string (``lambda job: f"customer:{job.customer_id}"``);
    None, the default, is the class itself. A delivery finding the key at its limit is given back for
    ``delay`` seconds, no attempt charged.
    """
    if key is not None and not isinstance(key, str) and not callable(key):
        raise TypeError("limit_concurrency(key=...) takes a str or a callable of the job")
    if isinstance(key, str) and not 0 < len(key) <= MAX_KEY_LENGTH:
        raise ValueError(f"limit_concurrency(key=...) must be 1 to {MAX_KEY_LENGTH} characters")
    if type(max) is not int or not 1 <= max <= MAX_SLOTS:
        raise ValueError(f"limit_concurrency(max=...) must be an int from 1 to {MAX_SLOTS}")
    if type(delay) not in (int, float) or not 0 < delay <= MAX_RETRY_DELAY:
        raise ValueError(f"limit_concurrency(delay=...) must be a number of seconds above 0, at most {MAX_RETRY_DELAY}")

    def apply(cls: J) -> J:
        if not (isinstance(cls, type) and issubclass(cls, Job)):
            raise TypeError("@limit_concurrency decorates a Job subclass")
        cls.concurrency_limit = ConcurrencyLimit(job_class_path(cls) if key is None else key, max, float(delay))
        return cls

    return apply


def slot_store_of(queue: Queue) -> SlotStore:
    """Where ``queue``'s concurrency slots live: the backend's own store, else rows in a Django database
    (``jobs_database()``, or the default one) that the app provides."""
    if isinstance(queue, OwnSlotStore):
        return queue.slot_store()
    if not app_loaded():
        raise InvalidQueueArgumentError(
            f"concurrency limits on the {queue.backend_name} backend keep their slots in the Django database: "
            "add 'kinetis_queue' to INSTALLED_APPS"
        )
    from kinetis_queue.limits.database import database_slots  # plug-in point: its models load with the app

    return database_slots(queue)


def slot_lease_of(queue: Queue) -> float:
    """Seconds a slot of ``queue`` is leased for before it must be renewed: the backend's own figure, else the
    visibility timeout of a RenewableQueue (a crashed worker's slot frees with its deliveries' leases), else
    DEFAULT_LEASE."""
    if isinstance(queue, OwnSlotLease):
        return queue.slot_lease()
    return float(queue.visibility_timeout()) if isinstance(queue, RenewableQueue) else float(DEFAULT_LEASE)
