"""RedisQueue: three keys per queue and a Lua script for every transition that could lose a job."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Self

from kinetis_queue.backends.redis import scripts
from kinetis_queue.backends.redis.client import RedisClient, cache_connection, connection_factory
from kinetis_queue.backends.redis.cluster import ClusterClient
from kinetis_queue.backends.redis.options import OPTIONS
from kinetis_queue.backends.redis.rates import RedisRates
from kinetis_queue.backends.redis.restart import RedisRestartMarker
from kinetis_queue.backends.redis.sentinel import SentinelClient, sentinel_factory
from kinetis_queue.backends.redis.slots import RedisSlots
from kinetis_queue.backends.redis.unique import RedisLocks
from kinetis_queue.conf import ConnectionSettings
from kinetis_queue.contracts import (
    ClearableQueue,
    DisposableQueue,
    JobSettlement,
    PreparedPush,
    QueuedJob,
    QueueStats,
    RenewableQueue,
    Reserved,
    StoreRefusal,
)
from kinetis_queue.exceptions import (
    ConnectionFailedError,
    InvalidQueueArgumentError,
    MalformedJobSettledError,
    MalformedQueuedJobDataError,
    OutcomeUnknownError,
    StaleJobHandleError,
)
from kinetis_queue.limits.store import OwnSlotStore
from kinetis_queue.payload.envelope import Envelope, decode_envelope
from kinetis_queue.ratelimits.store import OwnRateStore
from kinetis_queue.unique.store import OwnLockStore
from kinetis_queue.validation import QUEUE_NAME

logger = logging.getLogger("kinetis_queue.redis")

#: Most due delayed envelopes one sweep moves to pending (contract: "Backend mechanisms: Redis").
DELAYED_PROMOTION_BATCH_SIZE = 100
#: Most expired leases one sweep reclaims; the rest waits for the next sweep.
LEASE_RECLAIM_BATCH_SIZE = 100
#: The last part of each of a queue's keys that holds jobs (QueueKeys, PriorityKeys), which queue_names() looks for.
KEY_KINDS = frozenset((b"pending", b"delayed", b"leased", b"prioritized"))
#: The shortest wait ``_wait`` blocks on the server for: Redis counts a BLMOVE timeout in whole
#: milliseconds, and one that rounds to 0 would block for ever.
SHORTEST_BLOCK = 0.002
#: Seconds a wait's BLMOVE reply may come after its block ends before the wait is given up as a
#: stalled server: short, so a stall costs a pop little more than one socket timeout (its next sweep's).
WAIT_REPLY_MARGIN = 0.25
#: Seconds the outbox relay's markers live (relay_push.lua): a resend within this long is recognised and skipped.
RELAY_DEDUPE_FOR = 3600
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


class PriorityKeys(NamedTuple):
    """A queue's keys for jobs with a priority (priority.lua): ``...:prioritized`` (a sorted set of the
    ready ones, in delivery order) and ``...:sequence`` (the counter that orders one priority)."""

    prioritized: str
    sequence: str


class RedisQueue(ClearableQueue, RenewableQueue, DisposableQueue, OwnLockStore, OwnSlotStore, OwnRateStore):
    """Jobs in Redis: a pending list, a delayed and a leased sorted set per queue.

    Reservation: sweep.lua moves the pending tail into ``leased``, scored by Redis ``TIME`` plus
    the visibility timeout, so every worker shares one lease clock. Fence: the handle is the exact
    leased envelope; ack()/fail() are a ``ZREM`` of it and release()/renew() scripts act only while
    it is still leased, so a settlement for a reclaimed or finished delivery raises
    StaleJobHandleError and writes nothing (contract: "Delivery receipts and stale settlements").
    Recovery: every sweep promotes due delayed jobs (by the popping worker's clock) and reclaims
    expired leases (attempts + 1, a new handle), at most 100 of each per sweep; there is no reaper.
    Transport: a command is never re-sent; ConnectionFailedError means it was never sent,
    OutcomeUnknownError that its reply was lost (client.py).

    Topologies (docs/backends/redis.md): a standalone server; a Redis Cluster (``cluster_nodes``:
    cluster.py), where each queue's keys carry the queue's name as hash tag
    (``kinetis_queue:{queue}:pending``), so every script touches one slot, and a batch that spans
    queues is sent as one call per queue; a Sentinel-managed master (``sentinels``: sentinel.py).
    ``wait_replicas``: a push is acknowledged only once that many replicas have it (Redis WAIT).

    Priority (docs/priority.md): a ready job whose priority is not 0 waits in a fourth key, the queue's
    ``prioritized`` sorted set (priority.lua), reserved before the pending list (priority above 0) or
    after it (below 0); a job without priority takes the same path as before priorities existed.
    A prioritized push does not wake a waiting pop (``_wait`` watches the pending lists): it is
    found by the next sweep, within the pause (at most SWEEP_PAUSE).

    Batches: pop_many() reserves up to its limit per queue in one sweep.lua call, ack_many() is one
    ack_many.lua call, push_many() one push_many.lua call. Wake-up: a pop whose sweep found nothing
    blocks until a pending list it watches is not empty (``_wait``), so a push costs nothing more.
    Thread-safe: the client hands each command a connection of its own.
    """

    backend_name = "redis"
    settings_schema = OPTIONS
    supports_priority = True

    def __init__(
        self,
        *,
        url: str = "redis://127.0.0.1:6379/0",
        options: dict[str, Any] | None = None,
        socket_timeout: float | None = None,
        prefix: str = "",
        visibility_timeout: int = 300,
        connection: str | None = None,
        cluster_nodes: Sequence[str] | None = None,
        sentinels: Sequence[str] | None = None,
        sentinel_service: str | None = None,
        wait_replicas: int = 0,
        wait_timeout: float = 1.0,
    ) -> None:
        """Open nothing yet: the first command connects (``options`` are redis-py connection arguments).

        ``cluster_nodes`` (start node URLs) selects a Redis Cluster, ``sentinels`` with ``sentinel_service``
        a Sentinel-managed master; otherwise ``url`` is one standalone server.
        """
        super().__init__(connection=connection)
        self._client: RedisClient | ClusterClient
        #: Redis Cluster: queue keys carry a hash tag, and batches are split per queue.
        self.cluster = bool(cluster_nodes)
        if cluster_nodes:
            from redis.connection import parse_url

            starts = [(str(node["host"]), int(node["port"])) for node in map(parse_url, cluster_nodes)]
            self._client = ClusterClient(starts, connection_factory(cluster_nodes[0], options or {}, socket_timeout))
        elif sentinels:
            if not sentinel_service:
                raise ValueError("sentinels need the sentinel_service they monitor")
            self._client = SentinelClient(sentinel_factory(sentinels, sentinel_service, options or {}, socket_timeout))
        else:
            self._client = RedisClient(connection_factory(url, options or {}, socket_timeout))
        self._client.replicate(wait_replicas, wait_timeout)
        self.prefix = prefix
        self._visibility_timeout = visibility_timeout
        self._keys: dict[str, QueueKeys] = {}
        self._priority_keys: dict[str, PriorityKeys] = {}
        self._sweep_keys: dict[str, tuple[str, ...]] = {}
        self._locks = RedisLocks(self)
        self._slots = RedisSlots(self)
        self._rates = RedisRates(self)

    @classmethod
    def from_settings(cls, settings: ConnectionSettings) -> Self:
        options = settings.options
        if options["CACHE"] is not None:
            url, kwargs = cache_connection(options["CACHE"])
        elif options["URL"] is not None:
            url, kwargs = options["URL"], {}
        else:
            url, kwargs = "", {}
        return cls(
            url=url,
            options=kwargs,
            socket_timeout=options["SOCKET_TIMEOUT"],
            prefix=options["PREFIX"],
            visibility_timeout=settings.visibility_timeout,
            connection=settings.name,
            cluster_nodes=options["CLUSTER_NODES"],
            sentinels=options["SENTINELS"],
            sentinel_service=options["SENTINEL_SERVICE"],
            wait_replicas=options["WAIT_REPLICAS"],
            wait_timeout=options["WAIT_TIMEOUT"],
        )

    def base(self, queue: str) -> str:
        """What each of a queue's keys starts with: ``{PREFIX}kinetis_queue:{queue}:``, the name in braces
        (its hash tag) on a cluster, so all of them are in one slot."""
        return f"{self.prefix}kinetis_queue:{{{queue}}}:" if self.cluster else f"{self.prefix}kinetis_queue:{queue}:"

    def keys(self, queue: str) -> QueueKeys:
        """The three keys of a validated queue name."""
        keys = self._keys.get(queue)
        if keys is None:
            base = self.base(queue)
            keys = self._keys[queue] = QueueKeys(base + "pending", base + "delayed", base + "leased")
        return keys

    def priority_keys(self, queue: str) -> PriorityKeys:
        """The prioritized set and sequence key of a validated queue name."""
        keys = self._priority_keys.get(queue)
        if keys is None:
            base = self.base(queue)
            keys = self._priority_keys[queue] = PriorityKeys(base + "prioritized", base + "sequence")
        return keys

    def all_keys(self, queue: str) -> tuple[str, ...]:
        """The five keys of a queue, as sweep.lua takes them: pending, delayed, leased, prioritized, sequence."""
        keys = self._sweep_keys.get(queue)
        if keys is None:
            keys = self._sweep_keys[queue] = (*self.keys(queue), *self.priority_keys(queue))
        return keys

    def dispose(self) -> None:
        self._client.close()

    # -- the contract -----------------------------------------------------------------------------

    def visibility_timeout(self) -> int:
        return self._visibility_timeout

    def lock_store(self) -> RedisLocks:
        """Unique jobs' locks on this server, written by the push's script (kinetis_queue/backends/redis/unique.py)."""
        return self._locks

    def slot_store(self) -> RedisSlots:
        """Concurrency slots on this server (kinetis_queue/backends/redis/slots.py)."""
        return self._slots

    def rate_store(self) -> RedisRates:
        """Rate-limited starts counted on this server (kinetis_queue/backends/redis/rates.py)."""
        return self._rates

    def _push(self, envelope: Envelope, delay: float, queue: str) -> None:
        keys = self.keys(queue)
        if delay > 0:
            # Contract, "Delayed jobs": scored with the pushing process's clock.
            self._client.execute("ZADD", keys.delayed, envelope.pushed_at + delay, envelope.to_json(), durable=True)
        elif envelope.metadata and envelope.priority:
            args = (1, "", envelope.priority, envelope.to_json())
            self._client.script(scripts.PUSH_MANY, (*keys[:2], *self.priority_keys(queue)), args, durable=True)
        else:
            self._client.execute("LPUSH", keys.pending, envelope.to_json(), durable=True)

    def _push_many(self, prepared: Sequence[PreparedPush]) -> None:
        """One round trip for the whole batch, run whole: one LPUSH (or ZADD) with every envelope when
        they share a queue and all are immediate (or all delayed), else one push_many.lua call."""
        first = prepared[0]
        if all(item.queue == first.queue for item in prepared):
            own = self.keys(first.queue)
            if all(item.delay <= 0 and not item.envelope.priority for item in prepared):
                # LPUSH a b c leaves c at the head: a, the first given, is the first reserved.
                self._client.execute(
                    "LPUSH", own.pending, *(item.envelope.to_json() for item in prepared), durable=True
                )
                return
            if all(item.delay > 0 for item in prepared):
                scored = ((item.envelope.pushed_at + item.delay, item.envelope.to_json()) for item in prepared)
                self._client.execute("ZADD", own.delayed, *(value for pair in scored for value in pair), durable=True)
                return
        elif self.cluster:
            # Keys of several queues are in several slots: one call per queue, each run whole.
            _per_queue(self._push_many, _by_queue(prepared, lambda item: item.queue))
            return
        numbers: dict[str, int] = {}
        keys: list[str] = []
        args: list[float | int | str] = []
        for item in prepared:
            number = numbers.get(item.queue)
            if number is None:
                number = numbers[item.queue] = len(numbers) + 1
                keys += (*self.keys(item.queue)[:2], *self.priority_keys(item.queue))
            ready_at: float | str = item.envelope.pushed_at + item.delay if item.delay > 0 else ""
            args += (number, ready_at, item.envelope.priority, item.envelope.to_json())
        self._client.script(scripts.PUSH_MANY, keys, args, durable=True)

    def store_many(self, prepared: Sequence[PreparedPush]) -> list[StoreRefusal]:
        """The outbox relay's send: one relay_push.lua call, which skips an envelope a killed relay had
        already stored (its marker, kept RELAY_DEDUPE_FOR seconds) instead of storing it twice.

        Redis refuses nothing for good: every error (the connection, memory, a queue key of another
        type) is raised, and the relay sends the rows again; what the script stored before the error
        carries its marker, so the resend skips it.
        """
        if not prepared:
            return []
        if self.cluster and any(item.queue != prepared[0].queue for item in prepared):
            _per_queue(self.store_many, _by_queue(prepared, lambda item: item.queue))
            return []
        numbers: dict[str, int] = {}
        queue_keys: list[str] = []
        markers: list[str] = []
        args: list[float | int | str] = []
        now = time.time()
        for item in prepared:
            number = numbers.get(item.queue)
            if number is None:
                number = numbers[item.queue] = len(numbers) + 1
                queue_keys += (*self.keys(item.queue)[:2], *self.priority_keys(item.queue))
            envelope = item.envelope
            tag = f"{{{item.queue}}}:" if self.cluster else ""  # in the queue's slot on a cluster
            markers.append(f"{self.prefix}kinetis_queue:{tag}relayed:{envelope.id}:{envelope.pushed_at!r}")
            ready_at: float | str = now + item.delay if item.delay > 0 else ""  # what is left of it, from now
            args += (number, ready_at, envelope.priority, envelope.to_json())
        self._client.script(
            scripts.RELAY_PUSH, [*queue_keys, *markers], [len(queue_keys), RELAY_DEDUPE_FOR, *args], durable=True
        )
        return []

    def _sweep(self, queues: tuple[str, ...]) -> QueuedJob | None:
        for queue in queues:
            jobs, malformed = self._probe(queue, 1)
            if malformed:
                raise malformed[0]
            if jobs:
                return jobs[0]
        return None

    def _sweep_many(self, queues: tuple[str, ...], limit: int) -> Reserved:
        """Each queue in priority order, until ``limit`` deliveries: a lower one only when the higher
        ones gave fewer (as successive pops would); one sweep.lua call per queue reached."""
        found = Reserved()
        for queue in queues:
            jobs, malformed = self._probe(queue, limit - len(found.jobs) - len(found.malformed))
            found.jobs.extend(jobs)
            found.malformed.extend(malformed)
            if len(found.jobs) + len(found.malformed) >= limit:
                break
        return found

    def _probe(self, queue: str, limit: int) -> tuple[list[QueuedJob], list[MalformedJobSettledError]]:
        """One queue's part of a sweep: promote, reclaim, reserve up to ``limit`` (sweep.lua, then
        reclaim.lua and sweep.lua again if leases had expired); malformed ones removed and reported."""
        keys = self.keys(queue)
        sweep_keys = self.all_keys(queue)
        sweep_args = (time.time(), self._visibility_timeout)
        batches = (DELAYED_PROMOTION_BATCH_SIZE, LEASE_RECLAIM_BATCH_SIZE)
        reserved, *expired = self._client.script(scripts.SWEEP, sweep_keys, (*sweep_args, *batches, limit))
        if expired and self._reclaim(queue, keys, expired) and len(reserved) < limit:
            # What was just reclaimed is on the pending tail, reserved next as successive pops
            # would (sweep.lua reserved one at most): reserve now, without a second promotion or
            # reclaim round (at most one batch of each per sweep).
            more, *_ = self._client.script(scripts.SWEEP, sweep_keys, (*sweep_args, 0, 0, limit - len(reserved)))
            reserved += more
        jobs: list[QueuedJob] = []
        malformed: list[MalformedJobSettledError] = []
        broken: list[bytes] = []
        for member in reserved:
            try:
                jobs.append(self._delivery(queue, member))
            except MalformedQueuedJobDataError as exc:
                # Contract, "Malformed stored messages": removed, then reported as settled.
                error = MalformedJobSettledError(f"a reserved message was malformed and has been removed: {exc}")
                error.__cause__ = exc
                malformed.append(error)
                broken.append(member)
        if broken:
            self._client.execute("ZREM", keys.leased, *broken, what="removal of a malformed job")
        return jobs, malformed

    def _reclaim(self, queue: str, keys: QueueKeys, expired: Sequence[bytes]) -> int:
        """Return expired leases to pending with attempts + 1; remove those that no longer decode."""
        triples: list[bytes | str | int] = []
        for member in expired:
            try:
                envelope = decode_envelope(member)
            except MalformedQueuedJobDataError:
                replacement, priority = "", 0  # reclaim.lua removes it (contract: "Backend mechanisms: Redis")
            else:
                replacement, priority = _next_attempt(envelope), envelope.priority
            triples += (member, replacement, priority)
        reclaimed, removed = self._client.script(
            scripts.RECLAIM, (keys.leased, keys.pending, *self.priority_keys(queue)), triples
        )
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

    def _ack_many(self, jobs: Sequence[QueuedJob]) -> list[StaleJobHandleError | None]:
        """One ack_many.lua call for every delivery, whatever their queues; each ZREM fenced on its own."""
        handles = [self._handle(job).member for job in jobs]  # every handle checked before any I/O
        if self.cluster and any(job.queue != jobs[0].queue for job in jobs):
            # One call per queue (one slot each), the results put back in the order given.
            results: dict[int, StaleJobHandleError | None] = {}
            positions = {id(job): number for number, job in enumerate(jobs)}
            for group in _by_queue(jobs, lambda job: job.queue):
                for job, result in zip(group, self._ack_many(group), strict=True):
                    results[positions[id(job)]] = result
            return [results[number] for number in range(len(jobs))]
        numbers: dict[str, int] = {}
        keys: list[str] = []
        args: list[int | str] = []
        for job, member in zip(jobs, handles, strict=True):
            number = numbers.get(job.queue)
            if number is None:
                number = numbers[job.queue] = len(numbers) + 1
                keys.append(self.keys(job.queue).leased)
            args += (number, member)
        removed = self._client.script(scripts.ACK_MANY, keys, args)
        return [None if n == 1 else StaleJobHandleError(JobSettlement.ACK) for n in removed]

    def _unreserve(self, job: QueuedJob, delay: float) -> None:
        """The same envelope back (no attempt charged), fenced (unreserve.lua): on the pending tail, or in
        the delayed set scored by this process's clock when ``delay`` is set."""
        member = self._handle(job).member
        keys = self.keys(job.queue)
        ready_at: float | str = time.time() + delay if delay > 0 else ""
        given_back = self._client.script(
            scripts.UNRESERVE,
            (keys.leased, keys.pending, keys.delayed, *self.priority_keys(job.queue)),
            (member, ready_at, job.priority),
        )
        if given_back != 1:
            raise StaleJobHandleError(JobSettlement.UNRESERVE)

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
            scripts.RELEASE,
            (keys.leased, keys.pending, keys.delayed, *self.priority_keys(job.queue)),
            (member, replacement, ready_at, envelope.priority),
        )
        if released != 1:
            raise StaleJobHandleError(JobSettlement.RELEASE)

    def _wait(self, queues: tuple[str, ...], seconds: float) -> None:
        """Block until one of the queues' pending lists is not empty, for ``seconds`` at most.

        Each pending list gets ``BLMOVE pending pending RIGHT RIGHT``, on a connection of its own:
        it returns once the list holds a job and moves its tail to where it was, so it changes
        nothing and consumes nothing, and a push, push_many(), immediate release() or unreserve()
        wakes it with no extra command of its own. Nothing is lost between the empty sweep and the
        wait: a job that arrived in between makes BLMOVE return at once. Every waiting worker
        wakes (then one reserves the job); ``seconds`` (the pause, at most SWEEP_PAUSE) still
        bounds the wait, so a delayed job becoming due starts within a pause. The reply is awaited
        for the block plus WAIT_REPLY_MARGIN, not the socket timeout (which may be shorter). A
        transport failure here only ends the pause early in effect: the rest is slept, and the
        next sweep reports it.
        """
        if seconds < SHORTEST_BLOCK:
            time.sleep(seconds)
            return
        started = time.monotonic()
        block = f"{seconds:.3f}"
        pending = [self.keys(queue).pending for queue in queues]
        commands = [("BLMOVE", key, key, "RIGHT", "RIGHT", block) for key in pending]
        try:
            self._client.wait_any(commands, seconds + WAIT_REPLY_MARGIN, what="wait")
        except (ConnectionFailedError, OutcomeUnknownError):
            time.sleep(max(0.0, seconds - (time.monotonic() - started)))

    def renew(self, job: QueuedJob) -> None:
        # Contract, "Reservation renewal": ZADD ... XX never adds a settled delivery back, and its
        # changed count is not read (0 for an unchanged score says nothing about staleness).
        member = self._handle(job).member
        self._client.script(scripts.RENEW, (self.keys(job.queue).leased,), (member, self._visibility_timeout))

    def _size(self, queue: str) -> int:
        return int(self._client.script(scripts.SIZE, (*self.keys(queue), self.priority_keys(queue).prioritized), ()))

    def _clear(self, queue: str) -> int:
        keys = self.keys(queue)
        return int(self._client.script(scripts.CLEAR, (keys.pending, keys.delayed, *self.priority_keys(queue)), ()))

    # -- the operator's side ----------------------------------------------------------------------

    def _stats(self, queue: str) -> QueueStats:
        # stats.lua reads the three keys at one instant: a due delayed job and an expired lease are
        # ready (the next sweep promotes or reclaims them), so ready + delayed == size().
        counts = self._client.script(
            scripts.STATS, (*self.keys(queue), self.priority_keys(queue).prioritized), (time.time(),)
        )
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
        client = self._client
        servers = client.masters() if isinstance(client, ClusterClient) else [client]
        for server in servers:  # on a cluster, every master holds some of the queues
            cursor: bytes | int = 0
            while True:
                cursor, found = server.execute("SCAN", cursor, "MATCH", pattern, "COUNT", SCAN_COUNT)
                for key in found:
                    queue, _, kind = key[len(base) :].rpartition(b":")
                    if self.cluster:
                        if not (queue.startswith(b"{") and queue.endswith(b"}")):
                            continue
                        queue = queue[1:-1]
                    name = queue.decode("ascii", "replace")
                    if kind in KEY_KINDS and QUEUE_NAME.fullmatch(name):
                        names.add(name)
                if int(cursor) == 0:
                    break
        return sorted(names)

    def restart_marker(self) -> RedisRestartMarker:
        """This connection's restart generation (kinetis_queue.worker.restart), on this server next to its queues.

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


def _by_queue[T](items: Sequence[T], queue_of: Callable[[T], str]) -> list[list[T]]:
    """``items`` grouped by queue, in the order each queue first appears, each group in the order given."""
    groups: dict[str, list[T]] = {}
    for item in items:
        groups.setdefault(queue_of(item), []).append(item)
    return list(groups.values())


def _per_queue(store: Callable[[Sequence[PreparedPush]], object], groups: list[list[PreparedPush]]) -> None:
    """``store`` each queue's part of a batch in turn (a cluster); once a part is stored, a later part's
    ConnectionFailedError becomes OutcomeUnknownError: the batch is then stored in part."""
    for number, group in enumerate(groups):
        try:
            store(group)
        except ConnectionFailedError as exc:
            if number == 0:
                raise
            raise OutcomeUnknownError(
                f"Redis stored the batch's jobs for {number} of its {len(groups)} queues; the rest was not sent ({exc})"
            ) from exc


def _glob_escape(text: bytes) -> bytes:
    """``text`` as a literal in a SCAN MATCH pattern: a PREFIX may hold glob characters."""
    return bytes(b for c in text for b in ((0x5C, c) if c in b"*?[]\\" else (c,)))
