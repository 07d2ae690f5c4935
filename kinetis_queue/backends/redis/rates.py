"""Rate limits on Redis: one key per rate key, counted on the server's clock (kinetis_queue.ratelimits).

``{PREFIX}kinetis_queue:rate:{digest}`` is a sliding window's sorted set of starts or a token bucket's arrival
time; take_rate.lua counts a start or returns the wait, in one script, so takers on every worker never race.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kinetis_queue.backends.redis import scripts
from kinetis_queue.ratelimits.store import WINDOW, RateLimit, RateStore

if TYPE_CHECKING:
    from kinetis_queue.backends.redis.queue import RedisQueue


class RedisRates(RateStore):
    """The Redis backend's rate store: see the module docstring."""

    def __init__(self, queue: RedisQueue) -> None:
        self.queue = queue

    def key(self, digest: str) -> str:
        return f"{self.queue.prefix}kinetis_queue:rate:{digest}"

    def take(self, digest: str, limit: RateLimit, token: str) -> float:
        last = token if limit.algorithm == WINDOW else limit.capacity
        args = (limit.algorithm, limit.limit, repr(float(limit.per)), last)
        wait = self.queue._client.script(scripts.TAKE_RATE, (self.key(digest),), args)
        return float(wait.decode("ascii") if isinstance(wait, bytes) else wait)
