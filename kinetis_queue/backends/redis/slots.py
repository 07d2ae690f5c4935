"""Concurrency slots on Redis: one sorted set per key, leases on the server's clock (kinetis_queue.limits).

``{PREFIX}kinetis_queue:limit:{slot key}`` holds each holder's token scored by its lease's end:
acquire_slot.lua takes a slot when fewer than the limit are live, renew_slot.lua extends a lease its
token still holds, and a release is one ``ZREM`` of the token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kinetis_queue.backends.redis import scripts
from kinetis_queue.limits.store import Slot, SlotStore

if TYPE_CHECKING:
    from kinetis_queue.backends.redis.queue import RedisQueue


class RedisSlots(SlotStore):
    """The Redis backend's slot store: see the module docstring."""

    def __init__(self, queue: RedisQueue) -> None:
        self.queue = queue

    def key(self, slot_key: str) -> str:
        return f"{self.queue.prefix}kinetis_queue:limit:{slot_key}"

    def acquire(self, key: str, limit: int, token: str, lease: float) -> Slot | None:
        taken = self.queue._client.script(scripts.ACQUIRE_SLOT, (self.key(key),), (limit, token, lease))
        return Slot(key, 0, token) if taken == 1 else None

    def renew(self, slot: Slot, lease: float) -> None:
        self.queue._client.script(scripts.RENEW_SLOT, (self.key(slot.key),), (slot.token, lease))

    def release(self, slot: Slot) -> None:
        self.queue._client.execute("ZREM", self.key(slot.key), slot.token)
