"""RabbitMqQueue: confirmed publishing, ``basic.get`` sweeps and the 22-tier delay ladder."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Self

import amqp
from amqp.exceptions import ConnectionError as AmqpConnectionError
from amqp.exceptions import MessageNacked

from kinetis_queue import crashpoints
from kinetis_queue.backends.rabbitmq import ladder
from kinetis_queue.backends.rabbitmq.options import DEFAULT_HEARTBEAT, DEFAULT_URL, MAX_HEARTBEAT, OPTIONS
from kinetis_queue.backends.rabbitmq.session import Session, parse_url
from kinetis_queue.conf import ConnectionSettings
from kinetis_queue.contracts import (
    ClearableQueue,
    DisposableQueue,
    JobSettlement,
    PreparedPush,
    QueuedJob,
    QueueStats,
)
from kinetis_queue.envelope import (
    Envelope,
    decode_body,
    dumps,
    encode_body,
    envelope_from_body,
    loads,
    settle_if_malformed,
)
from kinetis_queue.exceptions import (
    ConnectionFailedError,
    InvalidQueueArgumentError,
    KinetisQueueError,
    MalformedQueuedJobDataError,
    PublishNotConfirmedError,
    QueueConfigurationError,
)
from kinetis_queue.validation import validate_queue_name

logger = logging.getLogger("kinetis_queue.rabbitmq")

#: Seconds push() and release() wait for the broker's confirmation of a publish.
CONFIRM_TIMEOUT = 30.0


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


class RabbitMqQueue(ClearableQueue, DisposableQueue):
    """Jobs in RabbitMQ queues, reached with py-amqp (contract: "Backend mechanisms: RabbitMQ").

    Publishing: one confirm-mode channel; every publish is mandatory and persistent and waits for
    the broker's answer. A nack, a returned (unroutable) message or a missing confirmation raises
    PublishNotConfirmedError, so a queue deleted under a pusher is an error, never a silent drop.
    Reservation: an unacked ``basic.get`` delivery, held by its channel until the connection drops,
    when the broker requeues it with its attempt count unchanged: only release() writes the
    ``attempts`` header. The broker puts it back at the head; the next pop moves it behind the
    waiting jobs, so a job that kills its workers cannot hold the queue. Not renewable, and not
    fenced: a delivery tag names a delivery on its own channel only, so a receipt from a connection
    that has closed raises ConnectionFailedError and sends nothing. Delays: the ladder in ladder.py,
    in whole seconds rounded up, at most 4,194,303 s. Heartbeats are serviced by a background
    thread, so a job longer than the heartbeat interval keeps its connection and its delivery.

    The queue is thread-safe: every use of its one connection holds a lock (py-amqp is not
    thread-safe), released while pop() pauses between sweeps and while a job runs.
    """

    backend_name = "rabbitmq"
    settings_schema = OPTIONS

    def __init__(
        self, *, url: str = DEFAULT_URL, heartbeat: int = DEFAULT_HEARTBEAT, connection: str | None = None
    ) -> None:
        super().__init__(connection=connection)
        key = "url" if connection is None else f"KINETIS_QUEUE['CONNECTIONS'][{connection!r}]['URL']"
        self._params = parse_url(url, key)
        if type(heartbeat) is not int or not 0 <= heartbeat <= MAX_HEARTBEAT:
            key = "heartbeat" if connection is None else f"KINETIS_QUEUE['CONNECTIONS'][{connection!r}]['HEARTBEAT']"
            raise QueueConfigurationError(f"{key} must be an int of seconds from 0 (off) to {MAX_HEARTBEAT}")
        #: The heartbeat interval proposed to the broker, in seconds (0: none).
        self.heartbeat = heartbeat
        self._lock = threading.RLock()
        self._session: Session | None = None
        self._touched: set[str] = set()

    @classmethod
    def from_settings(cls, settings: ConnectionSettings) -> Self:
        return cls(
            url=settings.options["URL"],
            heartbeat=settings.options["HEARTBEAT"],
            connection=settings.name,
        )

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
            if self._session is session:
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
        seconds = ladder.whole_seconds(delay)
        body = encode_body(envelope).encode()
        # push() writes no attempts header: a redelivery after a dropped connection must arrive
        # with the count it had (contract: "Settlement").
        headers: dict[str, Any] = {"maxAttempts": envelope.max_attempts, "metadata": dumps(envelope.metadata)}
        if envelope.attempts:
            headers["attempts"] = envelope.attempts
        with self._using() as session:
            self._publish(session, queue, seconds, body, headers, envelope.id)

    def _sweep(self, queues: tuple[str, ...]) -> QueuedJob | None:
        # _using() written out: this is every pop's path.
        with self._lock:
            session = self._open()
            try:
                get = session.deliveries.basic_get
                for name in queues:
                    if name not in session.declared:
                        self._declare(session, name)
                    while (message := get(name, no_ack=False)) is not None:
                        tag = message.delivery_info["delivery_tag"]
                        session.unsettled.add(tag)
                        # Contract, "Malformed stored messages": RabbitMQ removes one with a reject
                        # without requeue.
                        job = settle_if_malformed(
                            partial(self._decode, session, name, tag, message), partial(self._reject, session, tag)
                        )
                        if not message.delivery_info.get("redelivered"):
                            return job
                        self._requeue_at_back(session, job.handle)
                return None
            except KinetisQueueError:
                raise
            except BaseException:
                self._discard(session)
                raise

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
        self._publish(session, handle.queue, 0, handle.body, headers, handle.job_id)
        session.deliveries.basic_ack(handle.tag)
        session.unsettled.discard(handle.tag)

    def ack(self, job: QueuedJob) -> None:
        with self._lock:
            handle = self._live(job, JobSettlement.ACK)
            self._settle(handle, JobSettlement.ACK, lambda session: session.deliveries.basic_ack(handle.tag))

    def fail(self, job: QueuedJob) -> None:
        with self._lock:
            handle = self._live(job, JobSettlement.FAIL)
            self._settle(handle, JobSettlement.FAIL, lambda session: session.deliveries.basic_reject(handle.tag, False))

    def _release(self, job: QueuedJob, delay: float) -> None:
        seconds = ladder.whole_seconds(delay, "release delay")
        with self._lock:
            handle = self._live(job, JobSettlement.RELEASE)
            # The replacement carries our three headers only: a copied x-death would make the
            # broker's dead-letter cycle detection drop it on its second pass through a tier.
            headers = {"attempts": handle.attempts + 1, "maxAttempts": handle.max_attempts, "metadata": handle.metadata}
            # Contract, "release() across backends": publish, wait for the confirmation, and only
            # then reject the original. A publish never confirmed leaves the original for the broker
            # to requeue; a stop between the two delivers the job twice.
            with self._using() as session:
                self._publish(session, handle.queue, seconds, handle.body, headers, handle.job_id)
            crashpoints.reach("rmq_after_release_confirm")  # test-only; off unless KQ_CRASHPOINT names it
            self._settle(
                handle,
                JobSettlement.RELEASE,
                lambda session: session.deliveries.basic_reject(handle.tag, False),
                published=True,
            )

    def _size(self, queue: str) -> int:
        return self._stats(queue).waiting

    def _stats(self, queue: str) -> QueueStats:
        """Ready jobs (the queue) and delayed ones (its 22 tiers); delivered, unacked ones are not counted."""
        with self._using() as session:
            self._declare_ladder(session, queue, ladder.TOP_TIER)
            # Top tier first, the way a delayed message travels; each count is a separate read.
            delayed = sum(ladder.count_tier(session.publisher, queue, tier) for tier in range(ladder.TOP_TIER, -1, -1))
            ready = self._count(session, queue)
        return QueueStats(waiting=ready + delayed, ready=ready, delayed=delayed, approximate=True)

    def _clear(self, queue: str) -> int:
        with self._using() as session:
            self._declare_ladder(session, queue, ladder.TOP_TIER)
            # Contract, "Counting and clearing": from the top tier down, then the real queue. The
            # broker never purges a delivered, unacked message.
            removed = sum(
                int(session.publisher.queue_purge(ladder.holding_queue(queue, tier)))
                for tier in range(ladder.TOP_TIER, -1, -1)
            )
            return removed + int(session.publisher.queue_purge(queue))

    def queue_known(self, queue: str) -> bool:
        """Whether the broker has ``queue`` declared: a passive declare on a channel of its own (the
        broker closes that channel when the queue is missing); declares nothing."""
        validate_queue_name(queue)
        with self._using() as session:
            channel = session.connection.channel()
            try:
                channel.queue_declare(queue, passive=True)
            except amqp.exceptions.NotFound:
                return False
            finally:
                if channel.is_open:
                    channel.close()
        return True

    def delete(self, queue: str) -> None:
        """Delete ``queue``, its delay ladder and the ladder's exchanges, with everything they hold.

        Not part of the contract: for tests and for retiring a queue.
        """
        validate_queue_name(queue)
        with self._using() as session:
            ladder.delete_ladder(session.publisher, queue)
            session.publisher.queue_delete(queue)
            session.forget(queue)
        self._touched.discard(queue)

    # -- helpers ----------------------------------------------------------------------------------

    def _declare(self, session: Session, queue: str) -> None:
        """Declare the queue durable on its first touch by this connection."""
        if queue not in session.declared:
            self._touched.add(queue)
            session.publisher.queue_declare(queue, durable=True, auto_delete=False)
            session.declared.add(queue)

    def _declare_ladder(self, session: Session, queue: str, top: int) -> None:
        """Declare the queue and its ladder tiers up to ``top``, bottom up (each tier's target first)."""
        self._declare(session, queue)
        for tier in range(session.ladders.get(queue, -1) + 1, top + 1):
            ladder.declare_tier(session.publisher, queue, tier)
            session.ladders[queue] = tier

    @staticmethod
    def _count(session: Session, queue: str) -> int:
        return int(session.publisher.queue_declare(queue, durable=True, auto_delete=False).message_count)

    def _publish(
        self, session: Session, queue: str, seconds: int, body: bytes, headers: dict[str, Any], job_id: str
    ) -> None:
        """Publish one message onto ``queue`` (or into its ladder) and wait for the confirmation."""
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
        session.returned.clear()
        try:
            session.publisher.basic_publish_confirm(
                message, exchange=exchange, routing_key=routing_key, mandatory=True, confirm_timeout=CONFIRM_TIMEOUT
            )
        except MessageNacked as exc:
            raise PublishNotConfirmedError(
                f"RabbitMQ refused the publish to queue {queue!r} (nack): the job was not queued"
            ) from exc
        except Exception as exc:
            self._discard(session)
            raise PublishNotConfirmedError(
                f"RabbitMQ did not confirm the publish to queue {queue!r} ({type(exc).__name__}: {exc}); "
                "whether the job was queued is unknown"
            ) from exc
        if session.returned:
            session.forget(queue)
            raise PublishNotConfirmedError(
                f"RabbitMQ returned the publish to queue {queue!r} as unroutable (reply code "
                f"{session.returned[0]}): the queue or its delay tier was deleted; the job was not queued"
            )

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
        session.unsettled.discard(handle.tag)

    def _reject(self, session: Session, tag: int) -> None:
        session.deliveries.basic_reject(tag, requeue=False)
        session.unsettled.discard(tag)

    def _live(self, job: QueuedJob, operation: JobSettlement) -> RabbitMqDelivery:
        """The receipt, if the delivery it names can still be settled; checked before any I/O."""
        handle = job.handle
        name = operation.value
        if not isinstance(handle, RabbitMqDelivery):
            raise InvalidQueueArgumentError(f"{name}(): this QueuedJob was not delivered by a RabbitMQ queue")
        if handle.owner is not self:
            raise InvalidQueueArgumentError(
                f"{name}(): this QueuedJob was delivered by another RabbitMqQueue; settle it on the one that popped it"
            )
        if handle.session is not self._session or not handle.session.usable():
            raise ConnectionFailedError(
                f"{name}() named a delivery of an AMQP connection that has since closed; nothing was sent. "
                "The broker requeued the delivery when that connection dropped, with its attempt count unchanged"
            )
        if handle.tag not in handle.session.unsettled:
            raise InvalidQueueArgumentError(
                f"{name}() named a delivery this queue has already settled; nothing was sent"
            )
        return handle

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
