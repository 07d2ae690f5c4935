"""Rate limits per time window (docs/rate-limits.md): at most N starts per S seconds of one rate key, across every
worker of a connection.

Declared on a Job class (``rate_limit = (10, 60)``, keyed by its ``rate_key()`` method, by default the class), on
``@task(rate_limit=..., rate_key=...)`` and per push (``push(job, rate_limit=(10, 60), rate_key="customer:42")``,
which replaces the class's). ``(limit, per)`` is a sliding window; ``RateLimit(limit, per, "bucket", burst=B)`` a
token bucket.

Before a delivery's attempt starts, ``RateLimitMiddleware.claim()`` asks the connection's RateStore to count one
start of the job's key: the Redis backend's own (take_rate.lua, on the server's clock), every other backend's rows
in a Django database. When the key is at its limit the delivery is given back (AtLimit) until the store says the
next start is allowed, no attempt charged. A start is counted before the attempt begins and never given back, so a
worker killed between the two leaves one start fewer, never one more (the bound: docs/rate-limits.md).

The class's key is read from the rebuilt job, so it never travels in the message; a push's own key travels hashed.
"""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from kinetis_queue.exceptions import InvalidQueueArgumentError
from kinetis_queue.job import Job, job_class_path
from kinetis_queue.middleware import Middleware, PushDraft, app_loaded
from kinetis_queue.outcomes import AtLimit
from kinetis_queue.ratelimits.store import ALGORITHMS as ALGORITHMS
from kinetis_queue.ratelimits.store import BUCKET as BUCKET
from kinetis_queue.ratelimits.store import MAX_KEY_LENGTH as MAX_KEY_LENGTH
from kinetis_queue.ratelimits.store import MAX_LIMIT as MAX_LIMIT
from kinetis_queue.ratelimits.store import MAX_PER as MAX_PER
from kinetis_queue.ratelimits.store import WINDOW as WINDOW
from kinetis_queue.ratelimits.store import OwnRateStore, RateLimit, RateStore, rate_digest
from kinetis_queue.validation import MAX_RETRY_DELAY

if TYPE_CHECKING:
    from kinetis_queue.contracts import Queue, QueuedJob

__all__ = ["BUCKET", "WINDOW", "RateLimit", "RateLimitMiddleware", "as_rate_limit", "rate_store_of"]

#: Where an envelope's metadata carries a push's own limit (and its key's digest when the push named a key).
METADATA_KEY: Final = "kinetis_queue.rate"


def as_rate_limit(value: object, where: str) -> RateLimit:
    """``value`` as a RateLimit: ``(limit, per)``, ``(limit, per, algorithm)`` or a RateLimit, checked; raises
    InvalidQueueArgumentError naming ``where`` (the option or attribute) and the rule broken, never a value."""
    if isinstance(value, RateLimit):
        limit = value
    elif isinstance(value, tuple) and len(value) in (2, 3):
        limit = RateLimit(*value)
    else:
        raise InvalidQueueArgumentError(
            f"{where} must be (limit, per), (limit, per, algorithm) or a RateLimit, e.g. (10, 60): 10 per minute"
        )
    if type(limit.limit) is not int or not 1 <= limit.limit <= MAX_LIMIT:
        raise InvalidQueueArgumentError(f"{where}: the limit must be an int from 1 to {MAX_LIMIT}")
    if type(limit.per) not in (int, float) or not math.isfinite(limit.per) or not 0 < limit.per <= MAX_PER:
        raise InvalidQueueArgumentError(f"{where}: per must be a number of seconds above 0, at most {MAX_PER}")
    if limit.algorithm not in ALGORITHMS:
        raise InvalidQueueArgumentError(f"{where}: the algorithm must be one of {', '.join(map(repr, ALGORITHMS))}")
    if limit.burst is not None:
        if limit.algorithm != BUCKET:
            raise InvalidQueueArgumentError(f"{where}: burst is a token bucket's (algorithm 'bucket')")
        if type(limit.burst) is not int or not 1 <= limit.burst <= MAX_LIMIT:
            raise InvalidQueueArgumentError(f"{where}: burst must be an int from 1 to {MAX_LIMIT}")
    return RateLimit(limit.limit, float(limit.per), limit.algorithm, limit.burst)


def _checked_key(value: object, where: str) -> str:
    if type(value) is not str or not 0 < len(value) <= MAX_KEY_LENGTH:
        raise InvalidQueueArgumentError(f"{where} must be a non-empty str of at most {MAX_KEY_LENGTH} characters")
    return value


#: Per Job class: its declared limit (None: none), checked once.
_declared: dict[type[Job], RateLimit | None] = {}
_declared_lock = threading.Lock()


def declared_limit(cls: type[Job]) -> RateLimit | None:
    """The class's ``rate_limit`` attribute as a RateLimit (None when it has none), checked once per class."""
    try:
        return _declared[cls]
    except KeyError:
        pass
    value = getattr(cls, "rate_limit", None)
    limit = None if value is None else as_rate_limit(value, f"{job_class_path(cls)}.rate_limit")
    with _declared_lock:
        _declared[cls] = limit
    return limit


def class_key(instance: Job) -> str:
    """The job's rate key as its class gives it: ``rate_key()`` when the class defines one, else its class path.
    A key method that raises or returns no valid key is the job's own failure (its type is named, no value)."""
    path = job_class_path(type(instance))
    method = getattr(instance, "rate_key", None)
    if method is None:
        return path
    try:
        value = method()
    except Exception as exc:  # its message may hold argument values: only the type is shown
        raise InvalidQueueArgumentError(f"the rate key of {path} raised {type(exc).__name__}") from None
    return f"{path}\0{_checked_key(value, f'the rate key of {path}')}"


def rate_store_of(queue: Queue) -> RateStore:
    """Where ``queue`` counts rate-limited starts: the backend's own store, else rows in a Django database that
    the app provides."""
    if isinstance(queue, OwnRateStore):
        return queue.rate_store()
    if not app_loaded():
        raise InvalidQueueArgumentError(
            f"rate limits on the {queue.backend_name} backend count their starts in the Django database: "
            "add 'kinetis_queue' to INSTALLED_APPS"
        )
    from kinetis_queue.ratelimits.database import database_rates  # plug-in point: its models load with the app

    return database_rates(queue)


def _stored(metadata: Mapping[str, Any] | None) -> tuple[RateLimit, str | None] | None:
    """A push's own limit and key digest from the envelope's metadata; None when it has none or it is unreadable
    (a tampered envelope is then limited by its class alone, never failed for it)."""
    data = metadata.get(METADATA_KEY) if metadata else None
    if type(data) is not dict:
        return None
    try:
        limit = as_rate_limit(RateLimit(data["n"], data["per"], data["alg"], data.get("burst")), "stored")
    except (KeyError, TypeError, InvalidQueueArgumentError):
        return None
    key = data.get("key")
    return limit, key if type(key) is str and len(key) == 32 else None


class RateLimitMiddleware(Middleware):
    """Rate limits in the chain (kinetis_queue.middleware). On the push side: a push's own ``rate_limit`` and
    ``rate_key`` checked and carried in its metadata. Around deliveries: ``claim()`` counts one start of the job's
    key or gives the delivery back (AtLimit) until the next start is allowed."""

    options = frozenset({"rate_limit", "rate_key"})

    def __init__(self) -> None:
        self.queue: Queue | None = None
        self._store: RateStore | None = None

    def prepare(self, draft: PushDraft) -> None:
        declared = declared_limit(type(draft.job))  # a bad declaration is refused at push, not met by a worker
        options = draft.options
        if not options:
            return
        given, key = options.get("rate_limit"), options.get("rate_key")
        if given is None and key is None:
            return
        limit = as_rate_limit(given, "rate_limit") if given is not None else declared
        if limit is None:
            raise InvalidQueueArgumentError("rate_key needs a rate limit: give rate_limit=(limit, per) or declare one")
        data: dict[str, Any] = {"n": limit.limit, "per": limit.per, "alg": limit.algorithm}
        if limit.burst is not None:
            data["burst"] = limit.burst
        if key is not None:
            written = f"{draft.job_class}\0{_checked_key(key, 'rate_key')}"
            data["key"] = rate_digest(draft.queue.connection, limit.algorithm, written)
        draft.metadata[METADATA_KEY] = data

    def start(self, queue: Queue) -> None:
        self.queue = queue

    def claim(self, job: QueuedJob, instance: Job) -> None:
        found = self.limit_of(job, instance)
        if found is None:
            return
        limit, digest = found
        wait = self._rates().take(digest, limit, uuid.uuid4().hex)
        if wait > 0:
            raise AtLimit(
                min(wait, MAX_RETRY_DELAY), f"its rate key is at its limit of {limit.limit} per {limit.per:g}s"
            )

    def limit_of(self, job: QueuedJob, instance: Job) -> tuple[RateLimit, str] | None:
        """The limit that applies to this delivery and its key's digest: the push's own, else the job's."""
        connection = self.queue.connection if self.queue is not None else None
        stored = _stored(job.metadata)
        if stored is not None:
            limit, digest = stored
            return limit, digest or rate_digest(connection, limit.algorithm, class_key(instance))
        own = getattr(instance, "rate_limit_for", None)  # a carrier job deciding per job (django.tasks' RunTask)
        if own is not None:
            decided: tuple[RateLimit, str] | None = own()
            return None if decided is None else (decided[0], rate_digest(connection, decided[0].algorithm, decided[1]))
        declared = declared_limit(type(instance))
        if declared is None:
            return None
        return declared, rate_digest(connection, declared.algorithm, class_key(instance))

    def _rates(self) -> RateStore:
        store = self._store
        if store is None:
            if self.queue is None:
                raise RuntimeError("RateLimitMiddleware.claim() before start(): the worker starts its hooks first")
            store = self._store = rate_store_of(self.queue)
        return store
