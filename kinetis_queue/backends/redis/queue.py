"""RedisQueue: three keys per queue and a Lua script for every transition that could lose a job."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Any, NamedTuple, Self

from kinetis_queue.backends.redis import scripts
from kinetis_queue.backends.redis.client import RedisClient, cache_connection, connection_factory
from kinetis_queue.backends.redis.options import OPTIONS
from kinetis_queue.backends.redis.restart import RedisRestartMarker
from kinetis_queue.conf import ConnectionSettings
from kinetis_queue.contracts import (
    ClearableQueue,
    DisposableQueue,
    JobSettlement,
    QueuedJob,
    QueueStats,
    RenewableQueue,
)
from kinetis_queue.envelope import Envelope, decode_envelope, settle_if_malformed
from kinetis_queue.exceptions import InvalidQueueArgumentError, MalformedQueuedJobDataError, StaleJobHandleError
from kinetis_queue.validation import QUEUE_NAME

logger = logging.getLogger("kinetis_queue.redis")

#: Most due delayed envelopes one sweep moves to pending (contract: "Backend mechanisms: Redis").
DELAYED_PROMOTION_BATCH_SIZE = 100
#: Most expired leases one sweep reclaims; the rest waits for the next sweep.
LEASE_RECLAIM_BATCH_SIZE = 100
#: The last part of each of a queue's keys (QueueKeys), which queue_names() looks for.
KEY_KINDS = frozenset((b"pending", b"delayed", b"leased"))
#: Keys one SCAN call examines (a hint to the server) while queue_names() lists the queues.
SCAN_COUNT = 1000


def _next_attempt(envelope: Envelope) -> str:
    """The replacement a release or reclaim writes: the same job (id, pushedAt), attempts + 1."""
    return dataclasses.replace(envelope, attempts=envelope.attempts + 1).to_json()


class RedisHandle(NamedTuple):
    """The delivery receipt: the leased envelope, exactly as stored (the leased set's member)."""

    member: str


class QueueKeys(NamedTuple):
    """The three keys of one queue: ``{PREFIX}kinetis_queue:{queue}:pending|delayed|leased``."""

    pending: str
    delayed: str
    leased: str


class RedisQueue(ClearableQueue, RenewableQueue, DisposableQueue):
    """Jobs in Redis: a pending list, a delayed and a leased sorted set per queue.

    Reservation: sweep.lua moves the pending tail into ``leased``, scored by Redis ``TIME`` plus
    the visibility timeout, so every worker shares one lease clock. Fence: the handle is the exact
    leased envelope; ack()/fail() are a ``ZREM`` of it and release()/renew() scripts act only while
    it is still leased, so a settlement for a reclaimed or finished delivery raises
    StaleJobHandleError and writes nothing (contract: "Delivery receipts and stale settlements").
    Recovery: every sweep promotes due delayed jobs (by the popping worker's clock) and reclaims
    expired leases (attempts + 1, a new handle), at most 100 of each per sweep; there is no reaper.
    Transport: a command is never re-sent; ConnectionFailedError means it was never sent,
    OutcomeUnknownError that its reply was lost (client.py). Only a standalone server is supported.
    """

    backend_name = "redis"
    settings_schema = OPTIONS

    def __init__(
        self,
        *,
        url: str = "redis://127.0.0.1:6379/0",
        options: dict[str, Any] | None = None,
        socket_timeout: float | None = None,
        prefix: str = "",
        visibility_timeout: int = 300,
        connection: str | None = None,
    ) -> None:
        """Open nothing yet: the first command connects (``options`` are redis-py connection arguments)."""
        super().__init__(connection=connection)
        self._client = RedisClient(connection_factory(url, options or {}, socket_timeout))
        self.prefix = prefix
        self._visibility_timeout = visibility_timeout
        self._keys: dict[str, QueueKeys] = {}

    @classmethod
    def from_settings(cls, settings: ConnectionSettings) -> Self:
        options = settings.options
        if options["CACHE"] is not None:
            url, kwargs = cache_connection(options["CACHE"])
        else:
            url, kwargs = options["URL"], {}
        return cls(
            url=url,
            options=kwargs,
            socket_timeout=options["SOCKET_TIMEOUT"],
            prefix=options["PREFIX"],
            visibility_timeout=settings.visibility_timeout,
            connection=settings.name,
        )

    def keys(self, queue: str) -> QueueKeys:
        """The three keys of a validated queue name."""
        keys = self._keys.get(queue)
        if keys is None:
            base = f"{self.prefix}kinetis_queue:{queue}:"
            keys = self._keys[queue] = QueueKeys(base + "pending", base + "delayed", base + "leased")
        return keys

    def dispose(self) -> None:
        self._client.close()

    # -- the contract -----------------------------------------------------------------------------

    def visibility_timeout(self) -> int:
        return self._visibility_timeout

    def _push(self, envelope: Envelope, delay: float, queue: str) -> None:
        keys = self.keys(queue)
        if delay > 0:
            # Contract, "Delayed jobs": scored with the pushing process's clock.
            self._client.execute("ZADD", keys.delayed, envelope.pushed_at + delay, envelope.to_json())
        else:
            self._client.execute("LPUSH", keys.pending, envelope.to_json())

    def _sweep(self, queues: tuple[str, ...]) -> QueuedJob | None:
        for queue in queues:
            found = self._probe(queue)
            if found is not None:
                return found
        return None

    def _probe(self, queue: str) -> QueuedJob | None:
        """One queue's part of a sweep: promote, reclaim, reserve (sweep.lua, then reclaim.lua if due)."""
        keys = self.keys(queue)
        sweep_args = (time.time(), self._visibility_timeout)
        batches = (DELAYED_PROMOTION_BATCH_SIZE, LEASE_RECLAIM_BATCH_SIZE)
        reserved, *expired = self._client.script(scripts.SWEEP, keys, (*sweep_args, *batches))
        if expired and self._reclaim(queue, keys, expired) and reserved is None:
            # What was just reclaimed is on the pending tail: reserve it now, without a second
            # promotion or reclaim round (at most one batch of each per sweep).
            reserved, *_ = self._client.script(scripts.SWEEP, keys, (*sweep_args, 0, 0))
        if reserved is None:
            return None
        return settle_if_malformed(
            lambda: self._delivery(queue, reserved),
            lambda: self._client.execute("ZREM", keys.leased, reserved, what="removal of a malformed job"),
        )

    def _reclaim(self, queue: str, keys: QueueKeys, expired: Sequence[bytes]) -> int:
        """Return expired leases to pending with attempts + 1; remove those that no longer decode."""
        pairs: list[bytes | str] = []
        for member in expired:
            try:
                envelope = decode_envelope(member)
            except MalformedQueuedJobDataError:
                replacement = ""  # reclaim.lua removes it (contract: "Backend mechanisms: Redis")
            else:
                replacement = _next_attempt(envelope)
            pairs += (member, replacement)
        reclaimed, removed = self._client.script(scripts.RECLAIM, (keys.leased, keys.pending), pairs)
        if removed:
            logger.warning("Removed %d expired lease(s) on queue %r whose job data was malformed", removed, queue)
        return int(reclaimed)

    @staticmethod
    def _delivery(queue: str, member: bytes) -> QueuedJob:
        return QueuedJob.delivered(decode_envelope(member), queue, RedisHandle(member.decode("utf-8")))

    def ack(self, job: QueuedJob) -> None:
        self._remove(job, JobSettlement.ACK)

    def fail(self, job: QueuedJob) -> None:
        self._remove(job, JobSettlement.FAIL)

    def _remove(self, job: QueuedJob, operation: JobSettlement) -> None:
        removed = self._client.execute("ZREM", self.keys(job.queue).leased, self._handle(job).member)
        if removed != 1:
            raise StaleJobHandleError(operation)

    def _release(self, job: QueuedJob, delay: float) -> None:
        member = self._handle(job).member
        try:
            envelope = decode_envelope(member)
        except MalformedQueuedJobDataError:
            # Every handle pop() hands out decoded: this one was never a leased envelope.
            raise InvalidQueueArgumentError("this QueuedJob's handle is not a Redis delivery receipt") from None
        replacement = _next_attempt(envelope)
        # Contract, "Delayed jobs": a delayed retry is scored with the releasing process's clock.
        ready_at: float | str = time.time() + delay if delay > 0 else ""
        keys = self.keys(job.queue)
        released = self._client.script(
            scripts.RELEASE, (keys.leased, keys.pending, keys.delayed), (member, replacement, ready_at)
        )
        if released != 1:
            raise StaleJobHandleError(JobSettlement.RELEASE)

    def renew(self, job: QueuedJob) -> None:
        # Contract, "Reservation renewal": ZADD ... XX never adds a settled delivery back, and its
        # changed count is not read (0 for an unchanged score says nothing about staleness).
        member = self._handle(job).member
        self._client.script(scripts.RENEW, (self.keys(job.queue).leased,), (member, self._visibility_timeout))

    def _size(self, queue: str) -> int:
        return int(self._client.script(scripts.SIZE, self.keys(queue), ()))

    def _clear(self, queue: str) -> int:
        keys = self.keys(queue)
        return int(self._client.script(scripts.CLEAR, (keys.pending, keys.delayed), ()))

    # -- the operator's side ----------------------------------------------------------------------

    def _stats(self, queue: str) -> QueueStats:
        # stats.lua reads the three keys at one instant: a due delayed job and an expired lease are
        # ready (the next sweep promotes or reclaims them), so ready + delayed == size().
        counts = self._client.script(scripts.STATS, self.keys(queue), (time.time(),))
        ready, delayed, reserved = (int(n) for n in counts)
        return QueueStats(waiting=ready + delayed, ready=ready, delayed=delayed, reserved=reserved)

    def queue_names(self) -> list[str]:
        """Queues with a key under this connection's prefix, found with SCAN (never KEYS, which blocks).

        Redis deletes an emptied key, so a listed queue holds a pending, delayed or leased job. SCAN
        walks the whole database in steps of about SCAN_COUNT keys, one round trip each.
        """
        base = f"{self.prefix}kinetis_queue:".encode()
        pattern = _glob_escape(base) + b"*"
        names: set[str] = set()
        cursor: bytes | int = 0
        while True:
            cursor, found = self._client.execute("SCAN", cursor, "MATCH", pattern, "COUNT", SCAN_COUNT)
            for key in found:
                queue, _, kind = key[len(base) :].rpartition(b":")
                name = queue.decode("ascii", "replace")
                if kind in KEY_KINDS and QUEUE_NAME.fullmatch(name):
                    names.add(name)
            if int(cursor) == 0:
                return sorted(names)

    def restart_marker(self) -> RedisRestartMarker:
        """This connection's restart generation (kinetis_queue.restart), on this server next to its queues.

        The key is ``{PREFIX}kinetis_queue:restart:{connection}:generation``: a queue's keys have
        three parts, so no queue name can produce it.
        """
        key = f"{self.prefix}kinetis_queue:restart:{self.connection or ''}:generation"
        return RedisRestartMarker(self._client, key)

    @staticmethod
    def _handle(job: QueuedJob) -> RedisHandle:
        if not isinstance(job.handle, RedisHandle):
            raise InvalidQueueArgumentError("this QueuedJob was not delivered by a Redis queue")
        return job.handle


def _glob_escape(text: bytes) -> bytes:
    """``text`` as a literal in a SCAN MATCH pattern: a PREFIX may hold glob characters."""
    return bytes(b for c in text for b in ((0x5C, c) if c in b"*?[]\\" else (c,)))
