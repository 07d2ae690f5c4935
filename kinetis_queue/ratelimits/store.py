"""The capability interface of rate limits: a limit (how many starts per how many seconds, by which algorithm),
where a connection keeps the starts it counts (RateStore), and what a backend implements to keep them itself
(OwnRateStore). A leaf below the feature: the Redis backend and the Django-database store import this, never the
middleware in ``kinetis_queue.ratelimits``."""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Final

#: The two algorithms: a sliding window (at most ``limit`` starts in any ``per`` seconds) and a token bucket
#: (``burst`` starts at once, then one every ``per / limit`` seconds).
WINDOW: Final = "window"
BUCKET: Final = "bucket"
ALGORITHMS: Final = (WINDOW, BUCKET)
#: The largest ``limit`` (a window keeps one entry per start it counts: keep them few).
MAX_LIMIT: Final = 10_000
#: The longest ``per``, in seconds (a day).
MAX_PER: Final = 86_400
#: The longest rate key a job may give (characters): it is hashed, never stored as written.
MAX_KEY_LENGTH: Final = 1000


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``limit`` starts per ``per`` seconds for one rate key, across every worker of a connection.

    ``algorithm`` is ``"window"`` (the default: a sliding window, never more than ``limit`` starts in any ``per``
    seconds of the store's clock) or ``"bucket"`` (a token bucket: up to ``burst`` starts at once, default
    ``limit``, refilled at ``limit`` per ``per`` seconds).
    """

    limit: int
    per: float
    algorithm: str = WINDOW
    burst: int | None = None

    @property
    def interval(self) -> float:
        """Seconds between two starts at the steady rate (a bucket's refill of one token)."""
        return self.per / self.limit

    @property
    def capacity(self) -> int:
        """A bucket's most tokens (``burst``, default ``limit``); a window's ``limit``."""
        return self.burst if self.burst is not None and self.algorithm == BUCKET else self.limit


def rate_digest(connection: str | None, algorithm: str, key: str) -> str:
    """The key a store writes: 32 hex digits of the connection, the algorithm and the rate key (never as written)."""
    return hashlib.sha256(f"kinetis_queue.rate\0{connection or ''}\0{algorithm}\0{key}".encode()).hexdigest()[:32]


class RateStore(ABC):
    """Where a connection counts the starts of its rate keys: one call takes a start or says how long to wait."""

    @abstractmethod
    def take(self, digest: str, limit: RateLimit, token: str) -> float:
        """Count one start of ``digest`` under ``limit`` and return 0.0, or take nothing and return the seconds
        until the next start is allowed (above 0). ``token`` names this start (a window's entry)."""


class OwnRateStore(ABC):
    """The capability of a backend that counts rate-limited starts in a store of its own (the Redis backend);
    every other backend's are rows in a Django database (kinetis_queue.ratelimits.database)."""

    @abstractmethod
    def rate_store(self) -> RateStore:
        """This connection's rate store."""
