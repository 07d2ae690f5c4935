"""Unique jobs on Redis: the lock and the job written by one script, released by the worker (kinetis_queue.unique).

The lock key is ``{PREFIX}kinetis_queue:unique:{lock key}`` (its last part is no queue key kind, so
``queue_names()`` never lists it). push_unique.lua (and a schedule's fire.lua, through the same
unique_push.lua function) writes the lock and the job together; the worker
frees the key with release_unique.lua when the holder starts (``"started"``) or just before it is
acked or failed for good (``"settled"``): a crash in between leaves a duplicate possible, never a key
held by a finished job. The lock's expiry is ``unique_for`` in every scope.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kinetis_queue.backends.redis import scripts
from kinetis_queue.contracts import PreparedPush, Queue, QueuedJob
from kinetis_queue.exceptions import DuplicateJobError
from kinetis_queue.unique.store import HeldLock, LockStore, UniqueLock, Until

if TYPE_CHECKING:
    from kinetis_queue.backends.redis.queue import RedisQueue

#: What push_unique.lua expects an envelope's JSON to start with: the id follows at once.
ENVELOPE_HEAD: Final = '{"id":"'


class RedisLocks(LockStore):
    """The Redis backend's lock store: see the module docstring."""

    def __init__(self, queue: RedisQueue) -> None:
        self.queue = queue

    def key(self, lock_key: str, queue: str) -> str:
        """The lock's key; on a cluster in ``queue``'s slot (its hash tag), so a lock is per queue there."""
        if self.queue.cluster:
            return f"{self.queue.base(queue)}unique:{lock_key}"
        return f"{self.queue.prefix}kinetis_queue:unique:{lock_key}"

    @staticmethod
    def lock_args(lock: UniqueLock) -> tuple[int, str]:
        """unique_push.lua's lifetime (milliseconds) and debounce flag of ``lock``."""
        return max(1, round(lock.seconds * 1000)), "1" if lock.debounce else "0"

    def push(self, queue: Queue, prepared: PreparedPush, lock: UniqueLock) -> str:
        member = prepared.envelope.to_json()
        if not member.startswith(f'{ENVELOPE_HEAD}{prepared.id}"'):  # pragma: no cover - Envelope.to_json's layout
            raise AssertionError("an envelope's JSON no longer starts with its id: push_unique.lua swaps it there")
        keys = self.queue.keys(prepared.queue)
        # Contract, "Delayed jobs": scored with the pushing process's clock (as RedisQueue._push).
        ready_at: float | str = prepared.envelope.pushed_at + prepared.delay if prepared.delay > 0 else ""
        args = (prepared.id, member, ready_at, *self.lock_args(lock), prepared.envelope.priority)
        job_id, outcome = self.queue._client.script(
            scripts.PUSH_UNIQUE,
            (self.key(lock.key, prepared.queue), keys.pending, keys.delayed, *self.queue.priority_keys(prepared.queue)),
            args,
            durable=True,
        )
        holder: str = job_id.decode("ascii")
        if outcome == b"held" and lock.raise_duplicate:
            raise DuplicateJobError(holder)
        return holder

    def started(self, queue: Queue, job: QueuedJob, lock: HeldLock) -> bool:
        if lock.until is Until.STARTED:
            self._release(job, lock)
        return True

    def settled(self, queue: Queue, job: QueuedJob, lock: HeldLock) -> None:
        self._release(job, lock)

    def _release(self, job: QueuedJob, lock: HeldLock) -> None:
        self.queue._client.script(scripts.RELEASE_UNIQUE, (self.key(lock.key, job.queue),), (job.id,))
