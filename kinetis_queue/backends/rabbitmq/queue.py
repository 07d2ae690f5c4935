"""RabbitMqQueue: confirmed publishing (one wait per batch), consumers with prefetch, and the 22-tier delay ladder."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Self

import amqp
from amqp.exceptions import ConnectionError as AmqpConnectionError

from kinetis_queue import crashpoints
from kinetis_queue.backends.rabbitmq import ladder
from kinetis_queue.backends.rabbitmq.options import (
    DEFAULT_HEARTBEAT,
    DEFAULT_SLOT_LEASE,
    DEFAULT_URL,
    MAX_HEARTBEAT,
    OPTIONS,
    QUEUE_TYPES,
)
from kinetis_queue.backends.rabbitmq.session import PROBE_ROUTING_KEY, PublishRefused, Session, parse_url
from kinetis_queue.conf import ConnectionSettings
from kinetis_queue.contracts import (
    ClearableQueue,
    DisposableQueue,
    JobSettlement,
    PreparedPush,
    QueuedJob,
    QueueStats,
    Reserved,
    StoreRefusal,
)
from kinetis_queue.exceptions import (
    ConnectionFailedError,
    InvalidQueueArgumentError,
    KinetisQueueError,
    MalformedJobSettledError,
    MalformedQueuedJobDataError,
    PublishNotConfirmedError,
    QueueConfigurationError,
    StaleJobHandleError,
)
from kinetis_queue.limits.store import OwnSlotLease
from kinetis_queue.payload.envelope import (
    Envelope,
    decode_body,
    dumps,
    encode_body,
    envelope_from_body,
    loads,
    settle_if_malformed,
)
from kinetis_queue.validation import validate_queue_name

logger = logging.getLogger("kinetis_queue.rabbitmq")

#: Seconds push() and release() wait for the broker's confirmation of a publish (push_many(): of the batch).
CONFIRM_TIMEOUT = 30.0
#: Job ids unreserve() remembers at most per connection (see _unreserve).
GIVEN_BACK_LIMIT = 10_000
#: Bytes a content header takes besides the metadata header, with room to spare (the other properties and headers).
UNFIT_MARGIN = 1024
#: AMQP reply codes of a channel the broker closes over a publish: the message refused (over
#: ``max_message_size``: for good), and an exchange that does not exist (a delay tier deleted: for now).
PRECONDITION_FAILED = 406
NOT_FOUND = 404


@dataclass(frozen=True, eq=False)
class _Outgoing:
    """One message ready to publish, and the queue it is for (error messages name it)."""

    message: Any
    exchange: str
    routing_key: str
    queue: str
    #: Why the broker cannot take it whatever is tried (its headers do not fit in one frame), or None.
    unfit: str | None = None


@dataclass(eq=False)
class RabbitMqDelivery:
    """The delivery receipt: a delivery tag on the deliveries channel of one connection.

    It also keeps what a release() republishes: the body as stored and the three headers, with
    ``attempts`` the count of completed attempts the message carried.
    """

    owner: RabbitMqQueue = field(repr=False)
    session: Session = field(repr=False)
    tag: int
    queue: str
    job_id: str
    body: bytes = field(repr=False)
    attempts: int
    max_attempts: int | None
    metadata: str = field(repr=False)


class RabbitMqQueue(ClearableQueue, DisposableQueue, OwnSlotLease):
    """Jobs in RabbitMQ queues, reached with py-amqp (contract: "Backend mechanisms: RabbitMQ").

    Publishing: one confirm-mode channel; every publish is mandatory and persistent and confirmed
    (push_many(): the whole batch published, then one wait). A nack, a returned (unroutable) message
    or a missing confirmation raises PublishNotConfirmedError, so a queue deleted under a pusher is
    an error, never a silent drop. Reservation: a consumer per queue with a per-consumer prefetch
    (the largest pop_many() limit asked), its deliveries buffered per queue and handed out in
    priority order, and ``basic.get`` for a queue whose consumer holds its whole prefetch. A
    delivery stays held by its channel until the connection drops, when the broker requeues it with
    its attempt count unchanged: only release() writes the ``attempts`` header. The broker puts it
    back at the head; the next sweep moves it behind the waiting jobs, so a job that kills its
    workers cannot hold the queue (unreserve() is the exception on its own connection). Not
    renewable, and not fenced: a delivery tag names a delivery on its own channel only, so a receipt
    from a connection that has closed raises ConnectionFailedError and sends nothing (ack_many()
    reports it as StaleJobHandleError). Delays: the ladder in ladder.py, in whole seconds rounded up,
    at most 4,194,303 s. Heartbeats are serviced by a background thread, so a job longer than the
    heartbeat interval keeps its connection and its delivery.

    Queue type (QUEUE_TYPE): classic queues, or quorum queues (``x-queue-type: quorum``) for the work
    queue and every ladder tier, the tiers dead-lettering at least once. No ``x-delivery-limit`` is
    set: max_attempts is counted by the ``attempts`` header as on classic queues, and every broker
    redelivery a sweep meets is republished (a new message, its x-delivery-count back at 0), so the
    broker's count of one message stays at a redelivery or two (docs/backends/rabbitmq.md). A queue
    already declared with the other type is a QueueConfigurationError naming QUEUE_TYPE.

    The queue is thread-safe: every use of its one connection holds a lock (py-amqp is not
    thread-safe), released while pop() waits on the socket between sweeps and while a job runs.
    """

    backend_name = "rabbitmq"
    settings_schema = OPTIONS

    def __init__(
        self,
        *,
        url: str = DEFAULT_URL,
        heartbeat: int = DEFAULT_HEARTBEAT,
        connection: str | None = None,
        slot_lease: int = DEFAULT_SLOT_LEASE,
        queue_type: str = "classic",
    ) -> None:
        super().__init__(connection=connection)
        key = "url" if connection is None else f"KINETIS_QUEUE['CONNECTIONS'][{connection!r}]['URL']"
        self._params = parse_url(url, key)
        if type(heartbeat) is not int or not 0 <= heartbeat <= MAX_HEARTBEAT:
            key = "heartbeat" if connection is None else f"KINETIS_QUEUE['CONNECTIONS'][{connection!r}]['HEARTBEAT']"
            raise QueueConfigurationError(f"{key} must be an int of seconds from 0 (off) to {MAX_HEARTBEAT}")
        #: The heartbeat interval proposed to the broker, in seconds (0: none).
        self.heartbeat = heartbeat
        if type(queue_type) is not str or queue_type not in QUEUE_TYPES:
            key = "queue_type" if connection is None else f"KINETIS_QUEUE['CONNECTIONS'][{connection!r}]['QUEUE_TYPE']"
            raise QueueConfigurationError(f"{key} must be one of {', '.join(repr(name) for name in QUEUE_TYPES)}")
        #: "classic" or "quorum": the type of the work queues and their ladder tiers.
        self.queue_type = queue_type
        self._quorum = queue_type == "quorum"
        #: The arguments every declaration of a work queue carries (the broker refuses a mismatch).
        self._queue_arguments: dict[str, Any] | None = {"x-queue-type": "quorum"} if self._quorum else None
        self._slot_lease = slot_lease
        self._lock = threading.RLock()
        self._session: Session | None = None
        self._touched: set[str] = set()

    @classmethod
    def from_settings(cls, settings: ConnectionSettings) -> Self:
        return cls(
            url=settings.options["URL"],
            heartbeat=settings.options["HEARTBEAT"],
            connection=settings.name,
            slot_lease=settings.options["SLOT_LEASE"],
            queue_type=settings.options["QUEUE_TYPE"],
        )

    def slot_lease(self) -> float:
        """SLOT_LEASE: a delivery has no visibility timeout here for its concurrency slot to follow."""
        return float(self._slot_lease)

    @property
    def declared(self) -> frozenset[str]:
        """Every queue this instance has declared (its ladder included), for teardown in tests."""
        return frozenset(self._touched)

    # -- the connection -------------------------------------------------------------------------

    def _open(self) -> Session:
        """The live Session, opening a new connection when there is none. Call under the lock."""
        session = self._session
        if session is not None:
            if session.usable():
                return session
            self._discard(session)  # after a fork(), the child forgets the parent's without closing it
        try:
            session = Session(self._params, self.heartbeat, self.connection or "direct")
        except Exception as exc:
            raise ConnectionFailedError(
                f"could not connect to RabbitMQ at {self._params.describe()} ({type(exc).__name__}: {exc})"
            ) from exc
        self._session = session
        session.start_pump(self._lock, self._pump_failed)
        return session

    @contextmanager
    def _using(self) -> Iterator[Session]:
        """Hold the lock and a live Session; any failure but our own errors discards the connection.

        py-amqp leaves a channel in an unknown state after a timeout or a close that arrived in
        the middle of another channel's wait, so the connection is never reused after one.
        """
        with self._lock:
            session = self._open()
            try:
                yield session
            except KinetisQueueError:
                raise
            except BaseException:
                self._discard(session)
                raise

    def _discard(self, session: Session) -> None:
        with self._lock:
            # Defensive: every caller holds the lock and passes the current session, so the test is
            # always true today; it keeps a late discard of an old session from dropping a new one.
            if self._session is session:  # pragma: no branch
                self._session = None
            session.close(graceful=False)

    def _pump_failed(self, session: Session, exc: BaseException) -> None:
        # Runs in the pump thread with the lock held.
        logger.warning(
            "RabbitMQ connection to %s lost while idle or while a job ran (%s: %s); its unsettled "
            "deliveries are requeued by the broker",
            self._params.describe(),
            type(exc).__name__,
            exc,
        )
        self._discard(session)

    def dispose(self) -> None:
        """Close the connection this queue opened; idempotent, and a no-op before first use."""
        with self._lock:
            session, self._session = self._session, None
            if session is not None:
                session.close(graceful=True)
        if session is not None:
            session.join_pump(timeout=5)

    # -- the contract -----------------------------------------------------------------------------

    def _check_push(self, prepared: PreparedPush) -> None:
        """Contract, "What push() guarantees": the delay ladder's ceiling, checked by prepare() before any I/O."""
        ladder.whole_seconds(prepared.delay)

    def _push(self, envelope: Envelope, delay: float, queue: str) -> None:
        with self._using() as session:
            self._publish_many(session, [self._outgoing(session, envelope, delay, queue)])

    def _push_many(self, prepared: Sequence[PreparedPush]) -> None:
        """Publish every job, then wait once for all the confirmations (one round trip per batch)."""
        with self._using() as session:
            batch = [self._outgoing(session, item.envelope, item.delay, item.queue) for item in prepared]
            self._publish_many(session, batch)

    def _outgoing(self, session: Session, envelope: Envelope, delay: float, queue: str) -> _Outgoing:
        # push() writes no attempts header: a redelivery after a dropped connection must arrive
        # with the count it had (contract: "Settlement").
        headers: dict[str, Any] = {"maxAttempts": envelope.max_attempts, "metadata": dumps(envelope.metadata)}
        if envelope.attempts:
            headers["attempts"] = envelope.attempts
        body = encode_body(envelope).encode()
        return self._message(session, queue, ladder.whole_seconds(delay), body, headers, envelope.id)

    def _sweep(self, queues: tuple[str, ...]) -> QueuedJob | None:
        reserved = self._sweep_many(queues, 1)
        if reserved.malformed:
            raise reserved.malformed[0]
        return reserved.jobs[0] if reserved.jobs else None

    def _sweep_many(self, queues: tuple[str, ...], limit: int) -> Reserved:
        """Hand out up to ``limit`` deliveries the consumers received, highest-priority queue first.

        Each queue has a consumer with a prefetch of at least ``limit`` (Session.consume); what it
        received waits in that queue's buffer. A queue whose consumer holds its whole prefetch is
        sent nothing more by the broker, so its waiting jobs are fetched with ``basic.get`` before
        any lower queue is looked at: a higher queue's jobs are never left on the broker while a
        lower one's are handed out, except a delivery still on the wire when the sweep ran.
        """
        with self._lock:
            session = self._open()
            try:
                for name in queues:
                    if name not in session.declared:
                        self._declare(session, name)
                session.consume(queues, limit)
                session.drain()
                jobs: list[QueuedJob] = []
                malformed: list[MalformedJobSettledError] = []
                for name in queues:
                    self._take(session, name, limit, jobs, malformed)
                    if len(jobs) >= limit:
                        break
                return Reserved(jobs=jobs, malformed=malformed)
            except KinetisQueueError:
                raise
            except BaseException:
                self._discard(session)
                raise

    def _take(
        self, session: Session, name: str, limit: int, jobs: list[QueuedJob], malformed: list[MalformedJobSettledError]
    ) -> None:
        buffer = session.buffers.get(name)
        while len(jobs) < limit:
            if buffer:
                message = buffer.popleft()
            elif session.saturated(name):
                message = session.deliveries.basic_get(name, no_ack=False)
                if message is None:
                    return
                session.received(message.delivery_info["delivery_tag"])
            else:
                return
            tag = message.delivery_info["delivery_tag"]
            # Contract, "Malformed stored messages": RabbitMQ removes one with a reject without requeue.
            try:
                job = settle_if_malformed(
                    partial(self._decode, session, name, tag, message), partial(self._reject, session, tag)
                )
            except MalformedJobSettledError as exc:
                malformed.append(exc)
                continue
            if message.delivery_info.get("redelivered") and not self._was_given_back(session, job.id):
                try:
                    self._requeue_at_back(session, job.handle)
                    continue
                except PublishNotConfirmedError:
                    if not session.usable():
                        raise  # the connection is gone with every delivery it held: the broker requeues them
                    # Refused (a nack, say from a full queue): the copy was not queued, so the job is
                    # handed out where it is rather than held here for nobody.
                    logger.warning(
                        "RabbitMQ refused to move redelivered job %s behind the queue; delivered in place", job.id
                    )
            jobs.append(job)

    @staticmethod
    def _was_given_back(session: Session, job_id: str) -> bool:
        if job_id in session.given_back:
            session.given_back.discard(job_id)
            return True
        return False

    def _wait(self, queues: tuple[str, ...], seconds: float) -> None:
        """Wait until a consumer of ``queues`` receives a delivery, up to ``seconds``.

        The lock is held only to read what arrived; the wait itself is a select() on the socket
        (and on a pipe that a delivery read by another thread writes to), so job threads publish
        and settle meanwhile. A push to one of the queues wakes it within a round trip.
        """
        deadline = time.monotonic() + seconds
        while True:
            with self._using() as session:
                if any(name not in session.consumers for name in queues):
                    return  # a new connection, or a consumer the broker cancelled: the next sweep starts it
                session.drain()
                if session.buffered(queues):
                    return
                session.waiting = True
            try:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                session.wait_readable(left)
            finally:
                session.waiting = False

    def _requeue_at_back(self, session: Session, handle: RabbitMqDelivery) -> None:
        """Move a broker redelivery behind the queue's waiting jobs: publish a copy, then ack the original.

        The broker requeues a dropped connection's deliveries at their old place, the head, and
        basic.get takes the head: a job that ends every worker that runs it (a poison pill) would
        be all the queue ever delivers. The copy keeps the body and our three headers, so its
        attempt count is unchanged (contract: only release() writes it), and it is delivered as soon
        as the jobs that waited ahead of it have been. A stop between the confirmation and the ack
        leaves both, and the job runs twice.
        """
        headers: dict[str, Any] = {"maxAttempts": handle.max_attempts, "metadata": handle.metadata}
        if handle.attempts:
            headers["attempts"] = handle.attempts
        self._publish_many(session, [self._message(session, handle.queue, 0, handle.body, headers, handle.job_id)])
        session.deliveries.basic_ack(handle.tag)
        session.settled(handle.tag)

    def ack(self, job: QueuedJob) -> None:
        with self._lock:
            handle = self._live(job, JobSettlement.ACK)
            self._settle(handle, JobSettlement.ACK, lambda session: session.deliveries.basic_ack(handle.tag))

    def fail(self, job: QueuedJob) -> None:
        with self._lock:
            handle = self._live(job, JobSettlement.FAIL)
            self._settle(handle, JobSettlement.FAIL, lambda session: session.deliveries.basic_reject(handle.tag, False))

    def _ack_many(self, jobs: Sequence[QueuedJob]) -> list[StaleJobHandleError | None]:
        """Ack every live delivery, with one ``multiple`` ack for the run of oldest tags when it
        covers exactly the deliveries asked for (every other delivery stays held).

        A receipt of a connection that has closed, or one already settled (earlier, or earlier in
        this list), is reported in its place as StaleJobHandleError(ACK): the delivery is no longer
        held here. A receipt of another queue raises InvalidQueueArgumentError before anything is sent.
        """
        with self._lock:
            for job in jobs:
                self._receipt(job, JobSettlement.ACK)
            results: list[StaleJobHandleError | None] = []
            tags: list[int] = []
            session = self._session
            for job in jobs:
                handle = self._receipt(job, JobSettlement.ACK)
                reason = self._stale(handle, JobSettlement.ACK)
                if reason is None and handle.tag in tags:
                    reason = "ack_many() named this delivery twice; the second was not sent"
                if reason is not None:
                    results.append(StaleJobHandleError(JobSettlement.ACK, reason))
                    continue
                tags.append(handle.tag)
                results.append(None)
            if not tags or session is None:
                return results
            ordered = sorted(tags)
            held = sorted(session.unsettled)
            run = 0
            while run < len(ordered) and held[run] == ordered[run]:
                run += 1
            try:
                if run > 1:
                    session.deliveries.basic_ack(ordered[run - 1], multiple=True)
                    ordered = ordered[run:]
                    for tag in held[:run]:
                        session.settled(tag)
                for tag in ordered:
                    session.deliveries.basic_ack(tag)
                    session.settled(tag)
            except (OSError, AmqpConnectionError) as exc:
                self._discard(session)
                raise ConnectionFailedError(
                    f"ack_many() could not be sent: the AMQP connection dropped ({type(exc).__name__}); the broker "
                    "requeues the deliveries not acked yet, with their attempt counts unchanged"
                ) from exc
            except BaseException:
                self._discard(session)
                raise
            return results

    def _unreserve(self, job: QueuedJob, delay: float) -> None:
        """Give a delivery back without charging an attempt.

        At once: ``basic.reject`` with requeue. The broker puts it back at its old place (the head,
        for the oldest job) with the same headers, so the attempt count is unchanged; it marks it
        redelivered, which a sweep treats as a crash and moves behind the waiting jobs, except on
        this connection, which remembers the ids it gave back and hands the redelivery out in place.
        Another worker that meets it first moves it behind (one confirmed publish). One frame, no reply.

        After a delay (a job held back at its concurrency limit): as a release, a confirmed publish
        into the delay ladder and then a reject, but with the attempt count unchanged.
        """
        if delay > 0:
            self._put_back(job, delay, JobSettlement.UNRESERVE, charge=False)
            return
        with self._lock:
            handle = self._live(job, JobSettlement.UNRESERVE)
            session = handle.session
            if len(session.given_back) >= GIVEN_BACK_LIMIT:
                session.given_back.clear()  # ids another worker took: forgetting one costs one move behind
            session.given_back.add(handle.job_id)
            self._settle(
                handle, JobSettlement.UNRESERVE, lambda session: session.deliveries.basic_reject(handle.tag, True)
            )

    def _release(self, job: QueuedJob, delay: float) -> None:
        self._put_back(job, delay, JobSettlement.RELEASE, charge=True)

    def _put_back(self, job: QueuedJob, delay: float, operation: JobSettlement, *, charge: bool) -> None:
        """Publish the delivery again after ``delay`` (attempts + 1 when ``charge``), then reject it."""
        seconds = ladder.whole_seconds(delay, "release delay" if charge else "unreserve delay")
        with self._lock:
            handle = self._live(job, operation)
            # The replacement carries our three headers only: a copied x-death would make the
            # broker's dead-letter cycle detection drop it on its second pass through a tier.
            attempts = handle.attempts + 1 if charge else handle.attempts
            headers = {"attempts": attempts, "maxAttempts": handle.max_attempts, "metadata": handle.metadata}
            # Contract, "release() across backends": publish, wait for the confirmation, and only
            # then reject the original. A publish never confirmed leaves the original for the broker
            # to requeue; a stop between the two delivers the job twice.
            with self._using() as session:
                message = self._message(session, handle.queue, seconds, handle.body, headers, handle.job_id)
                self._publish_many(session, [message])
            crashpoints.reach("rmq_after_release_confirm")  # test-only; off unless KQ_CRASHPOINT names it
            self._settle(
                handle,
                operation,
                lambda session: session.deliveries.basic_reject(handle.tag, False),
                published=True,
            )

    def _size(self, queue: str) -> int:
        return self._stats(queue).waiting

    def _stats(self, queue: str) -> QueueStats:
        """Ready jobs (the queue) and delayed ones (the tiers of its ladder that exist); delivered, unacked ones
        are not counted. Declares the queue only: a read creates no tier, so a dashboard or a metrics scrape
        reading every queue's depth does not give each one a ladder (22 queues and exchanges)."""
        with self._using() as session:
            self._declare(session, queue)
            with self._own_channel(session) as channel:
                delayed = sum(ladder.existing_tier_counts(channel, queue))
            # Deliveries our consumer received and no pop handed out yet are waiting work too.
            ready = self._count(session, queue) + len(session.buffers.get(queue, ()))
        return QueueStats(waiting=ready + delayed, ready=ready, delayed=delayed, approximate=True)

    def _clear(self, queue: str) -> int:
        """Purge the tiers of the queue's ladder that exist, then the queue; declares the queue only, as _stats."""
        with self._using() as session:
            self._declare(session, queue)
            with self._own_channel(session) as channel:
                top = len(ladder.existing_tier_counts(channel, queue)) - 1
                # Contract, "Counting and clearing": from the top tier down, then the real queue. The
                # broker never purges a delivered, unacked message.
                removed = sum(ladder.purge_tier(channel, queue, tier) for tier in range(top, -1, -1))
            removed += int(session.publisher.queue_purge(queue))
            return removed + self._reject_buffered(session, queue)

    def queue_known(self, queue: str) -> bool:
        """Whether the broker has ``queue`` declared: a passive declare on a channel of its own (the
        broker closes that channel when the queue is missing); declares nothing."""
        validate_queue_name(queue)
        with self._using() as session, self._own_channel(session) as channel:
            try:
                channel.queue_declare(queue, passive=True)
            except amqp.exceptions.NotFound:
                return False
        return True

    def delete(self, queue: str) -> None:
        """Delete ``queue``, its delay ladder and the ladder's exchanges, with everything they hold.

        Not part of the contract: for tests and for retiring a queue.
        """
        validate_queue_name(queue)
        with self._using() as session:
            tag = session.consumers.pop(queue, None)
            if tag is not None:
                session.deliveries.basic_cancel(tag)
            self._reject_buffered(session, queue)
            ladder.delete_ladder(session.publisher, queue)
            session.publisher.queue_delete(queue)
            session.forget(queue)
        self._touched.discard(queue)

    # -- helpers ----------------------------------------------------------------------------------

    def _declare(self, session: Session, queue: str) -> None:
        """Declare the queue durable (of QUEUE_TYPE's type) on its first touch by this connection."""
        if queue not in session.declared:
            self._touched.add(queue)
            with self._declaring(session, queue):
                session.publisher.queue_declare(queue, durable=True, auto_delete=False, arguments=self._queue_arguments)
            session.declared.add(queue)

    def _declare_ladder(self, session: Session, queue: str, top: int) -> None:
        """Declare the queue and its ladder tiers up to ``top``, bottom up (each tier's target first)."""
        self._declare(session, queue)
        for tier in range(session.ladders.get(queue, -1) + 1, top + 1):
            with self._declaring(session, queue):
                ladder.declare_tier(session.publisher, queue, tier, self._quorum)
            session.ladders[queue] = tier

    @contextmanager
    def _declaring(self, session: Session, queue: str) -> Iterator[None]:
        """Turn the broker's refusal of a redeclaration with other arguments (406, which closes the
        channel: the connection is dropped) into an error naming QUEUE_TYPE."""
        try:
            yield
        except amqp.exceptions.PreconditionFailed as exc:
            self._discard(session)
            setting = (
                "queue_type"
                if self.connection is None
                else f"KINETIS_QUEUE['CONNECTIONS'][{self.connection!r}]['QUEUE_TYPE']"
            )
            raise QueueConfigurationError(
                f"RabbitMQ refused to declare queue {queue!r} (or a tier of its delay ladder) as a "
                f"{self.queue_type} queue: it exists with other arguments ({exc.reply_text}). A queue's type "
                f"cannot change: set {setting} to the type it has, or drain and delete the queue"
            ) from exc

    @staticmethod
    @contextmanager
    def _own_channel(session: Session) -> Iterator[Any]:
        """A channel for passive declares and purges, which the broker answers by closing the channel when
        the queue is missing (404): the publisher channel and its confirm mode are never lost over one.
        py-amqp opens a channel the broker closed again before it raises, so the channel stays usable."""
        channel = session.connection.channel()
        try:
            yield channel
        finally:
            channel.close()

    def _count(self, session: Session, queue: str) -> int:
        declared = session.publisher.queue_declare(
            queue, durable=True, auto_delete=False, arguments=self._queue_arguments
        )
        return int(declared.message_count)

    def _message(
        self, session: Session, queue: str, seconds: int, body: bytes, headers: dict[str, Any], job_id: str
    ) -> _Outgoing:
        """A persistent message for ``queue`` (or its ladder, declared up to the tier it enters)."""
        if seconds:
            top = ladder.entry_tier(seconds)
            self._declare_ladder(session, queue, top)
            exchange, routing_key = ladder.tier_exchange(queue, top), ladder.routing_key(seconds)
        else:
            self._declare(session, queue)
            exchange, routing_key = "", queue
        message = amqp.Message(
            body, content_type="application/json", delivery_mode=2, message_id=job_id, application_headers=headers
        )
        unfit = None
        frame_max = session.connection.frame_max
        # Only the metadata header is unbounded (at most 4 bytes a character); the exact size only when it may not fit.
        if 4 * len(headers["metadata"]) + UNFIT_MARGIN > frame_max and (size := session.header_size(message)):
            unfit = (
                f"its headers (the job's metadata) take {size} bytes, more than one AMQP frame holds on this "
                f"connection (frame_max {frame_max}): the broker would close the connection"
            )
        return _Outgoing(message, exchange, routing_key, queue, unfit)

    def _publish_many(self, session: Session, batch: Sequence[_Outgoing]) -> None:
        """Publish every message (mandatory), then wait once for the batch's confirmations.

        Each message is confirmed, nacked (not queued), returned as unroutable (not queued: its
        queue or delay tier was deleted) or left unanswered within CONFIRM_TIMEOUT (unknown: the
        connection is dropped). Any of them raises PublishNotConfirmedError with the counts; the
        others of the batch are queued.
        """
        unfit = [item for item in batch if item.unfit is not None]
        if unfit:
            what = f"the job for queue {unfit[0].queue!r}" if len(batch) == 1 else f"{len(unfit)} of {len(batch)} jobs"
            raise PublishNotConfirmedError(
                f"RabbitMQ cannot take {what}: {unfit[0].unfit}; nothing was published, nothing was queued"
            )
        try:
            nacked, returned = self._publish_confirmed(session, batch)
        except PublishRefused as refused:
            raise self._refused_error(batch, refused) from refused.error
        if not nacked and not returned:
            return
        if len(batch) == 1:
            if nacked:
                raise PublishNotConfirmedError(
                    f"RabbitMQ refused the publish to queue {batch[0].queue!r} (nack): the job was not queued"
                )
            raise PublishNotConfirmedError(
                f"RabbitMQ returned the publish to queue {batch[0].queue!r} as unroutable (reply code "
                f"{session.returned[0][0]}): the queue or its delay tier was deleted; the job was not queued"
            )
        failed = nacked | returned
        raise PublishNotConfirmedError(
            f"RabbitMQ did not queue {len(failed)} of {len(batch)} jobs ({len(nacked)} refused with a nack, "
            f"{len(returned)} returned as unroutable: a queue or delay tier was deleted); the other "
            f"{len(batch) - len(failed)} were queued"
        )

    @staticmethod
    def _refused_error(batch: Sequence[_Outgoing], refused: PublishRefused) -> PublishNotConfirmedError:
        """The error of a push whose channel the broker closed over a publish (the connection goes on)."""
        error = refused.error
        why = f"{error.reply_code} {error.reply_text}"
        if len(batch) == 1:
            return PublishNotConfirmedError(
                f"RabbitMQ refused the publish to queue {batch[0].queue!r} and closed the channel ({why}): the job "
                "was not queued"
            )
        unknown = len(batch) - len(refused.answered)
        return PublishNotConfirmedError(
            f"RabbitMQ refused a publish of {len(batch)} and closed the channel ({why}): {unknown} job(s) were "
            "left without an answer (those published before the refused one were queued, those after it were "
            "not; which one it was is not said), the others were answered"
        )

    def _publish_confirmed(self, session: Session, batch: Sequence[_Outgoing]) -> tuple[set[int], set[int]]:
        """Publish the batch and wait for its confirmations: the indexes (nacked, returned as unroutable).

        A failure to publish or a confirmation missing after CONFIRM_TIMEOUT drops the connection and
        raises PublishNotConfirmedError: whether each job was queued is unknown. A publish the broker
        refuses by closing the channel raises PublishRefused (session.py); the connection goes on.
        """
        try:
            first, nacked = session.publish_all(
                [(item.message, item.exchange, item.routing_key) for item in batch], CONFIRM_TIMEOUT
            )
        except PublishRefused as refused:
            if refused.error.reply_code == NOT_FOUND:
                session.declared.clear()  # an exchange of a ladder was deleted: declare everything again
                session.ladders.clear()
            raise
        except Exception as exc:
            self._discard(session)
            what = f"the publish to queue {batch[0].queue!r}" if len(batch) == 1 else f"{len(batch)} publishes"
            raise PublishNotConfirmedError(
                f"RabbitMQ did not confirm {what} ({type(exc).__name__}: {exc}); whether "
                f"{'the job was' if len(batch) == 1 else 'each job was'} queued is unknown"
            ) from exc
        return {seq - first for seq in nacked}, self._returned(session, batch)

    @staticmethod
    def _returned(session: Session, batch: Sequence[_Outgoing]) -> set[int]:
        """The indexes of the batch's messages the broker returned as unroutable (their queues are forgotten)."""
        returned: set[int] = set()
        if session.returned:
            returned_ids = {message_id for _, message_id in session.returned}
            for index, item in enumerate(batch):
                if item.message.properties.get("message_id") in returned_ids:
                    returned.add(index)
                    session.forget(item.queue)  # declared again by the next publish
        return returned

    def store_many(self, prepared: Sequence[PreparedPush]) -> list[StoreRefusal]:
        """The outbox relay's send: one confirmed batch, as ``_push_many``, each push's outcome its own.

        A nacked or returned (unroutable: its queue or delay tier was deleted under this connection)
        push is refused for now, the others were queued: the relay deletes those and sends these
        again (a returned push's queue is declared again first).

        A publish the broker refuses by closing the channel with 406 PRECONDITION_FAILED (a message
        over its ``max_message_size``) is refused for good. The close does not say which publish it
        was, and the batch's publishes the broker had not answered yet are answered never: each of
        them is probed (published alone, routed nowhere: the broker checks it and drops it), those
        the broker refuses again are refused for good, and the others are published again now, once
        (those published before the refused one were queued already: delivered twice). Any other
        close (a missing exchange, no permission), a transport error or a missing confirmation leaves
        the pushes without an answer refused for now. A push whose headers do not fit in one frame
        (the broker would close the connection) is refused for good without being sent.
        """
        if not prepared:
            return []
        with self._using() as session:
            batch = [self._outgoing(session, item.envelope, item.delay, item.queue) for item in prepared]
            unfit = [
                StoreRefusal(index, PublishNotConfirmedError(f"RabbitMQ cannot take the job: {item.unfit}"), final=True)
                for index, item in enumerate(batch)
                if item.unfit is not None
            ]
            sendable = [index for index, item in enumerate(batch) if item.unfit is None]
            if not sendable:
                return unfit
            refusals, unanswered, closed = self._store(session, batch, sendable, first=True)
            refusals += unfit
            if unanswered and closed is not None and closed.reply_code == PRECONDITION_FAILED:
                try:
                    for index, error in self._probe(session, batch, list(unanswered)):
                        refusals.append(StoreRefusal(index, error, final=True))
                        unanswered.remove(index)
                    if unanswered:
                        more, unanswered, closed = self._store(session, batch, unanswered, first=False)
                        refusals += more
                except PublishNotConfirmedError as exc:
                    refusals += [StoreRefusal(index, exc, final=False) for index in unanswered]
                    unanswered = []
        if unanswered:
            assert closed is not None
            error = PublishNotConfirmedError(
                f"RabbitMQ closed the channel over a publish ({closed.reply_code} {closed.reply_text}) before "
                "answering this one: whether the job was queued is unknown"
            )
            refusals += [StoreRefusal(index, error, final=False) for index in unanswered]
        return sorted(refusals, key=lambda refusal: refusal.index)

    def _store(
        self, session: Session, batch: Sequence[_Outgoing], indexes: list[int], *, first: bool
    ) -> tuple[list[StoreRefusal], list[int], amqp.exceptions.ChannelError | None]:
        """Publish ``batch[i]`` for each of ``indexes``, confirmed: (refusals for now: nacked or returned; the
        indexes left without an answer by a channel close, in publish order; that close, or None).

        A transport error raises PublishNotConfirmedError when ``first`` (none of the batch is known to be
        stored); afterwards it leaves every index of this send without an answer, refused for now.
        """
        items = [batch[index] for index in indexes]
        closed = None
        try:
            nacked, returned = self._publish_confirmed(session, items)
        except PublishRefused as refused:
            closed = refused.error
            # A message returned before the close was not queued, even when its ack came before the close too.
            nacked, returned = refused.nacked, self._returned(session, items) & refused.answered
            unanswered = [index for offset, index in enumerate(indexes) if offset not in refused.answered]
        except PublishNotConfirmedError as exc:
            if first:
                raise
            return [StoreRefusal(index, exc, final=False) for index in indexes], [], None
        else:
            unanswered = []
        refusals = [
            StoreRefusal(
                indexes[offset],
                PublishNotConfirmedError(f"RabbitMQ refused the publish to queue {items[offset].queue!r} (nack)"),
                final=False,
            )
            for offset in sorted(nacked)
        ]
        refusals += [
            StoreRefusal(
                indexes[offset],
                PublishNotConfirmedError(
                    f"RabbitMQ returned the publish to queue {items[offset].queue!r} as unroutable: the queue or "
                    "its delay tier was deleted"
                ),
                final=False,
            )
            for offset in sorted(returned - nacked)
        ]
        return refusals, unanswered, closed

    def _probe(
        self, session: Session, batch: Sequence[_Outgoing], indexes: Sequence[int]
    ) -> Iterator[tuple[int, PublishNotConfirmedError]]:
        """Which of ``batch[i]`` the broker refuses by closing the channel with 406: each one published alone to
        PROBE_ROUTING_KEY (not mandatory: routed nowhere, then dropped, so nothing is stored) and answered
        before the next. Yields (index, the refusal, naming the broker's reason and no argument value).

        A probe answered otherwise than with an ack or that 406 (a transport error, another close) drops the
        connection and raises PublishNotConfirmedError: the rest are not known to be refused.
        """
        for index in indexes:
            item = batch[index]
            try:
                session.publish_all([(item.message, "", PROBE_ROUTING_KEY)], CONFIRM_TIMEOUT, mandatory=False)
            except PublishRefused as refused:
                if refused.error.reply_code != PRECONDITION_FAILED:
                    raise PublishNotConfirmedError(
                        f"RabbitMQ closed the channel over a probe publish ({refused.error.reply_code} "
                        f"{refused.error.reply_text}): which job it refused is unknown"
                    ) from refused.error
                yield (
                    index,
                    PublishNotConfirmedError(
                        f"RabbitMQ refused the publish to queue {item.queue!r} for good ({refused.error.reply_code} "
                        f"{refused.error.reply_text}): the job was not queued"
                    ),
                )
            except Exception as exc:
                self._discard(session)
                raise PublishNotConfirmedError(
                    f"RabbitMQ did not answer a probe publish ({type(exc).__name__}: {exc}): which job it refused "
                    "is unknown"
                ) from exc

    def _reject_buffered(self, session: Session, queue: str) -> int:
        """Remove the deliveries our consumer of ``queue`` received and no pop handed out; how many."""
        buffer = session.buffers.pop(queue, None)
        removed = 0
        while buffer:
            self._reject(session, buffer.popleft().delivery_info["delivery_tag"])
            removed += 1
        return removed

    def _settle(
        self,
        handle: RabbitMqDelivery,
        operation: JobSettlement,
        send: Callable[[Session], None],
        *,
        published: bool = False,
    ) -> None:
        """Send the one frame that settles a live delivery (basic.ack and basic.reject get no reply)."""
        session = handle.session
        try:
            send(session)
        except (OSError, AmqpConnectionError) as exc:
            self._discard(session)
            then = (
                "the replacement is queued and the broker requeues the original: the job runs twice"
                if published
                else "the broker requeues the delivery, with its attempt count unchanged"
            )
            raise ConnectionFailedError(
                f"{operation.value}() could not be sent: the AMQP connection dropped ({type(exc).__name__}); {then}"
            ) from exc
        except BaseException:
            self._discard(session)
            raise
        session.settled(handle.tag)

    def _reject(self, session: Session, tag: int) -> None:
        session.deliveries.basic_reject(tag, requeue=False)
        session.settled(tag)

    def _receipt(self, job: QueuedJob, operation: JobSettlement) -> RabbitMqDelivery:
        """The receipt, if it is one of this queue's; InvalidQueueArgumentError otherwise."""
        handle = job.handle
        name = operation.value
        if not isinstance(handle, RabbitMqDelivery):
            raise InvalidQueueArgumentError(f"{name}(): this QueuedJob was not delivered by a RabbitMQ queue")
        if handle.owner is not self:
            raise InvalidQueueArgumentError(
                f"{name}(): this QueuedJob was delivered by another RabbitMqQueue; settle it on the one that popped it"
            )
        return handle

    def _stale(self, handle: RabbitMqDelivery, operation: JobSettlement) -> str | None:
        """Why the delivery can no longer be settled here (None: it can). Call under the lock."""
        name = operation.value
        if handle.session is not self._session or not handle.session.usable():
            return (
                f"{name}() named a delivery of an AMQP connection that has since closed; nothing was sent. "
                "The broker requeued the delivery when that connection dropped, with its attempt count unchanged"
            )
        if handle.tag not in handle.session.unsettled:
            return f"{name}() named a delivery this queue has already settled; nothing was sent"
        return None

    def _live(self, job: QueuedJob, operation: JobSettlement) -> RabbitMqDelivery:
        """The receipt, if the delivery it names can still be settled; checked before any I/O."""
        handle = self._receipt(job, operation)
        reason = self._stale(handle, operation)
        if reason is None:
            return handle
        if handle.session is not self._session or not handle.session.usable():
            raise ConnectionFailedError(reason)
        raise InvalidQueueArgumentError(reason)

    def _decode(self, session: Session, queue: str, tag: int, message: Any) -> QueuedJob:
        body = message.body
        if isinstance(body, str):  # py-amqp decodes the body when a publisher set content_encoding
            body = body.encode("utf-8")
        data = decode_body(body)
        headers = message.properties.get("application_headers")
        if type(headers) is not dict or "maxAttempts" not in headers or type(headers.get("metadata")) is not str:
            raise MalformedQueuedJobDataError(
                "stored job data is malformed: the maxAttempts and metadata (a JSON string) headers are missing"
            )
        metadata: str = headers["metadata"]
        envelope = envelope_from_body(
            data, headers.get("attempts", 0), headers["maxAttempts"], {} if metadata == "{}" else loads(metadata)
        )
        handle = RabbitMqDelivery(
            self, session, tag, queue, envelope.id, body, envelope.attempts, envelope.max_attempts, metadata
        )
        return QueuedJob.delivered(envelope, queue, handle)
