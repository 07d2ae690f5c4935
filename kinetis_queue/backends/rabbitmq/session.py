"""One AMQP connection of a RabbitMqQueue: its URL, its two channels, and the heartbeat pump.

py-amqp connections are not thread-safe, so every use of a Session happens under its queue's
lock, the pump included. A Session is never repaired: any failure while using it (other than a
nack or a returned message, which leave the channel consistent) discards the whole connection,
and the next operation opens a new one. The broker then requeues every delivery the old
connection held (contract: "Reservation and recovery", RabbitMQ row), and their receipts can no
longer be settled.
"""

from __future__ import annotations

import logging
import os
import select
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final
from urllib.parse import quote, unquote, urlsplit

import amqp
from amqp import method_framing, spec

from kinetis_queue.exceptions import QueueConfigurationError

logger = logging.getLogger("kinetis_queue.rabbitmq")

#: Seconds allowed for the TCP connect, TLS and AMQP handshakes.
CONNECT_TIMEOUT: Final = 10.0
#: Seconds a socket read or write may block: bounds every RPC and every wait for a confirmation.
OPERATION_TIMEOUT: Final = 30.0
#: How long one pump tick waits for an incoming frame (the lock is held meanwhile).
PUMP_READ_TIMEOUT: Final = 0.001
#: Methods one drain (a pump tick, a sweep) dispatches at most: a delivery with its content is one.
PUMP_MAX_FRAMES: Final = 100


@dataclass(frozen=True)
class ConnectionParams:
    """Where and how to connect, parsed from an ``amqp://`` or ``amqps://`` URL."""

    host: str
    port: int
    userid: str
    password: str = field(repr=False)
    virtual_host: str
    tls: bool

    def describe(self) -> str:
        """The broker's address for messages: no credentials."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'amqps' if self.tls else 'amqp'}://{host}:{self.port}/{quote(self.virtual_host, safe='')}"


def parse_url(url: object, key: str) -> ConnectionParams:
    """Parse ``amqp://user:password@host:port/vhost`` (``amqps://`` for TLS); errors name ``key``.

    As in kombu, the path after the first ``/`` is the URL-encoded virtual host, and ``//`` or an
    empty path mean ``/``. Credentials default to guest/guest and the port to 5672 (5671 for TLS).
    Messages never repeat the URL, which may hold a password.
    """
    if type(url) is not str:
        raise QueueConfigurationError(f"{key} must be an amqp:// or amqps:// URL string")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise QueueConfigurationError(f"{key} is not a valid URL (check the host and port)") from None
    if parts.scheme not in ("amqp", "amqps"):
        raise QueueConfigurationError(f"{key} must start with amqp:// or amqps://")
    if not parts.hostname:
        raise QueueConfigurationError(f"{key} must name a host")
    if parts.query or parts.fragment:
        raise QueueConfigurationError(
            f"{key} must not carry query options; set HEARTBEAT in the connection's settings instead"
        )
    tls = parts.scheme == "amqps"
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    return ConnectionParams(
        host=parts.hostname,
        port=port if port is not None else (5671 if tls else 5672),
        userid=unquote(parts.username) if parts.username is not None else "guest",
        password=unquote(parts.password) if parts.password is not None else "guest",
        virtual_host=unquote(path) or "/",
        tls=tls,
    )


def _ssl_options(params: ConnectionParams) -> dict[str, Any] | bool:
    if not params.tls:
        return False
    # py-amqp builds ssl.create_default_context() from "context": certificates are verified against
    # the system's CAs (or SSL_CERT_FILE) and the host name is checked.
    return {"context": {"check_hostname": True}, "server_hostname": params.host}


_BASIC_PUBLISH: Final = spec.Basic.Publish
#: A routing key no queue can have (the broker keeps ``amq.`` names to itself): a probe publish to it through
#: the default exchange, not mandatory, passes the broker's checks of a message and is then dropped.
PROBE_ROUTING_KEY: Final = "amq.kinetis-queue.probe"


class PublishRefused(Exception):
    """The broker closed the publisher channel over a publish of the batch (a channel error on ``basic.publish``:
    406 for a message it refuses, say over ``max_message_size``; 404 for a missing exchange; 403 for one it may
    not write to). The channel is open again, in confirm mode, on the same connection.

    ``answered``: the batch offsets the broker confirmed or nacked before the close (``nacked`` among them). The
    others have no answer and never will: those published before the refused one were taken and those after it
    were dropped, and which one it was is not said.
    """

    def __init__(self, error: amqp.exceptions.ChannelError, answered: set[int], nacked: set[int]) -> None:
        super().__init__(error)
        self.error = error
        self.answered = answered
        self.nacked = nacked


#: AMQP's frame type of a content header.
_CONTENT_HEADER = 2
#: A content header's fixed part: class-id (2 bytes), weight (2) and body size (8); property flags follow.
_HEADER_FIXED = 12
#: Property flags announcing no property at all.
_NO_PROPERTIES = b"\x00\x00"
#: An AMQP frame's bytes around its payload: type (1), channel (2), size (4) and the frame-end octet.
_FRAME_OVERHEAD = 8


def tolerant_frame_handler(connection: Any, callback: Any, **kwargs: Any) -> Callable[[Any], Any]:
    """py-amqp's frame reader, except that a content header whose properties do not decode is read
    as one without properties.

    py-amqp decodes the headers table as the frame arrives, and some values a publisher can send
    make that raise: an AMQP timestamp past the year 9999, a field of an unknown type. The exception
    would leave the connection expecting a header forever (so it must be dropped) and the message
    at the head of the queue for every worker after it. Read without properties, the message
    arrives with no headers, and the queue reports it as malformed and rejects it once.
    """
    on_frame = method_framing.frame_handler(connection, callback, **kwargs)

    def read(frame: tuple[int, int, Any]) -> Any:
        frame_type, channel, buf = frame
        if frame_type != _CONTENT_HEADER:
            return on_frame(frame)
        try:
            return on_frame(frame)
        except Exception:  # properties are assigned only once fully decoded, so the retry starts clean
            return on_frame((frame_type, channel, bytes(buf[:_HEADER_FIXED]) + _NO_PROPERTIES))

    return read


class Session:
    """An open connection with a channel for deliveries and a confirm-mode channel for the rest.

    ``deliveries`` holds one consumer per queue a pop has asked for (each with its own prefetch,
    see ``consume()``) and also runs ``basic.get``, ``basic.ack`` and ``basic.reject``;
    ``publisher`` publishes (every publish mandatory, persistent and confirmed) and declares,
    counts, purges and deletes. A delivery tag is scoped to its channel, so a receipt names this
    Session.
    """

    def __init__(self, params: ConnectionParams, heartbeat: int, name: str) -> None:
        self.connection = amqp.Connection(
            host=f"[{params.host}]:{params.port}" if ":" in params.host else f"{params.host}:{params.port}",
            userid=params.userid,
            password=params.password,
            virtual_host=params.virtual_host,
            ssl=_ssl_options(params),
            heartbeat=heartbeat,
            connect_timeout=CONNECT_TIMEOUT,
            read_timeout=OPERATION_TIMEOUT,
            write_timeout=OPERATION_TIMEOUT,
            client_properties={"connection_name": f"kinetis_queue {name} (pid {os.getpid()})"},
            frame_handler=tolerant_frame_handler,
        )
        try:
            self.connection.connect()
            self.deliveries = self.connection.channel()
            self.publisher = self.connection.channel()
            self.publisher.confirm_select()
        except BaseException:
            self.connection.collect()
            raise
        #: (reply code, message id) of messages the broker returned since the last publish began.
        self.returned: list[tuple[int, str | None]] = []
        self.publisher.events["basic_return"].add(self._on_return)
        #: Publisher confirms: the sequence number the next publish gets (the broker counts from 1
        #: after confirm.select), the numbers not answered yet, and those answered with a nack.
        self.next_seq = 1
        self.unconfirmed: set[int] = set()
        self.nacked: set[int] = set()
        self.publisher.events["basic_ack"].add(self._on_confirm)
        self.publisher.events["basic_nack"].add(partial(self._on_confirm, nack=True))
        #: Delivery tags received on ``deliveries`` and not settled yet, each with the consumer tag
        #: that received it ("" for a basic.get).
        self.unsettled: dict[int, str] = {}
        #: Consumer deliveries not settled yet, per consumer tag (the broker's prefetch counts them).
        self.outstanding: dict[str, int] = {}
        #: The consumer of each queue, and the per-consumer prefetch it was started with.
        self.consumers: dict[str, str] = {}
        self.prefetch = 0
        #: Deliveries a consumer received and no pop has handed out yet, per queue, in arrival order.
        self.buffers: dict[str, deque[Any]] = {}
        #: Ids of jobs this connection gave back with unreserve(): their redelivery keeps its place.
        self.given_back: set[str] = set()
        #: Queues declared on this connection, and the highest ladder tier declared for each.
        self.declared: set[str] = set()
        self.ladders: dict[str, int] = {}
        self.closed = False
        #: The process that opened the connection: a forked child must not use (or shut) its socket.
        self.pid = os.getpid()
        self._pump: HeartbeatPump | None = None
        #: A pipe a delivery read by another thread writes to, to end a wait() at once.
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        self.waiting = False

    def _on_return(self, exc: Exception, exchange: str, routing_key: str, message: Any) -> None:
        # RabbitMQ sends basic.return before the basic.ack of the same publish, so this has run by
        # the time the confirming publish returns (notes: "The return-handler pattern").
        message_id = getattr(message, "properties", {}).get("message_id")
        self.returned.append((int(getattr(exc, "reply_code", 0) or 0), message_id))

    def _on_confirm(self, tag: int, multiple: bool, *, nack: bool = False) -> None:
        answered = {seq for seq in self.unconfirmed if seq <= tag} if multiple else {tag} & self.unconfirmed
        self.unconfirmed -= answered
        if nack:
            self.nacked |= answered

    # -- publishing ---------------------------------------------------------------------------------

    def publish_all(
        self, batch: Sequence[tuple[Any, str, str]], timeout: float, *, mandatory: bool = True
    ) -> tuple[int, list[int]]:
        """Publish every ``(message, exchange, routing_key)`` (mandatory), then wait once for all the
        confirmations. Call under the lock.

        Returns the first sequence number used and those not confirmed: nacked, or unanswered when
        ``timeout`` ran out (then raises TimeoutError). Returned (unroutable) messages are in
        ``returned``, which this clears first. py-amqp's ``basic_publish_confirm`` waits for one
        answer per publish; a batch waits for one round trip in all. A channel error on one of the
        publishes raises PublishRefused, the connection still usable.
        """
        self.returned.clear()
        self.nacked.clear()
        first = self.next_seq
        # basic.publish written straight: py-amqp's basic_publish() also tries a zero-timeout read
        # before every publish (for connection.blocked notices, which this backend does not use),
        # a sixth of a batch's time; the confirmations are read once, below.
        send = self.publisher.send_method
        for message, exchange, routing_key in batch:
            seq = self.next_seq
            self.next_seq += 1
            self.unconfirmed.add(seq)
            send(_BASIC_PUBLISH, "Bssbb", (0, exchange, routing_key, mandatory, False), message)
        last = self.next_seq - 1
        deadline = time.monotonic() + timeout
        try:
            while any(seq <= last for seq in self.unconfirmed):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{sum(1 for seq in self.unconfirmed if seq <= last)} publishes unanswered")
                self.connection.drain_events(timeout=left)
        except amqp.exceptions.ChannelError as exc:
            # Only the publisher channel publishes. py-amqp answered the close and opened the channel again
            # (without confirm mode); anything else (the connection closing, the reopening failing) raised
            # something else, and the caller drops the connection.
            if exc.method_sig != _BASIC_PUBLISH or not self.publisher.is_open or not self.connection.connected:
                raise
            answered = {seq - first for seq in range(first, last + 1) if seq not in self.unconfirmed}
            nacked = {seq - first for seq in self.nacked if first <= seq <= last}
            self._confirm_again()
            raise PublishRefused(exc, answered, nacked) from exc
        return first, sorted(self.nacked)

    def _confirm_again(self) -> None:
        """Put the publisher channel the broker closed (and py-amqp opened again) back in confirm mode: the
        broker numbers its publishes from 1 again, and no answer to the old channel's will come."""
        self.unconfirmed.clear()
        self.nacked.clear()
        self.next_seq = 1
        self.publisher.confirm_select()

    def header_size(self, message: Any) -> int | None:
        """The size of ``message``'s content header when it does not fit in one frame (None: it fits).

        AMQP never splits a content header (the properties, the headers table above all): the broker
        closes the whole connection over one larger than the negotiated frame_max (501 FRAME_ERROR,
        frame_too_large), so such a message must not be sent. py-amqp serializes the properties the
        same way when it writes the frame.
        """
        size = _HEADER_FIXED + len(message._serialize_properties())
        return size if size > self.connection.frame_max - _FRAME_OVERHEAD else None

    # -- consumers ----------------------------------------------------------------------------------

    def consume(self, queues: Sequence[str], prefetch: int) -> None:
        """Have a consumer with at least ``prefetch`` on each of ``queues``. Call under the lock.

        The prefetch is per consumer (``basic.qos`` with global false, which applies to consumers
        started after it): raising it cancels every consumer and starts them again, in priority
        order, so a higher queue's waiting jobs are sent first. Deliveries received before a
        cancel stay held and buffered.
        """
        if prefetch > self.prefetch:
            for tag in list(self.consumers.values()):
                self.deliveries.basic_cancel(tag)
            self.consumers.clear()
            self.deliveries.basic_qos(0, prefetch, False)
            self.prefetch = prefetch
        for queue in queues:
            if queue not in self.consumers:
                self.buffers.setdefault(queue, deque())
                tag = self.deliveries.basic_consume(
                    queue,
                    callback=partial(self._on_delivery, queue),
                    on_cancel=partial(self._on_cancel, queue),
                )
                self.consumers[queue] = tag
                self.outstanding.setdefault(tag, 0)

    def saturated(self, queue: str) -> bool:
        """Whether the queue's consumer holds its full prefetch (the broker sends it nothing more)."""
        tag = self.consumers.get(queue)
        return tag is None or self.outstanding.get(tag, 0) >= self.prefetch

    def _on_delivery(self, queue: str, message: Any) -> None:
        tag = message.delivery_info["delivery_tag"]
        consumer = message.delivery_info.get("consumer_tag", "")
        self.unsettled[tag] = consumer
        self.outstanding[consumer] = self.outstanding.get(consumer, 0) + 1
        self.buffers.setdefault(queue, deque()).append(message)
        if self.waiting:
            try:
                os.write(self._wake_write, b"\0")
            except BlockingIOError:  # pragma: no cover - 64 KiB of unread wake-ups: the waiter is awake already
                pass

    def _on_cancel(self, queue: str, consumer_tag: str) -> None:
        # The broker cancelled the consumer (its queue was deleted): the next sweep declares the
        # queue again and starts a new one.
        self.consumers = {name: tag for name, tag in self.consumers.items() if tag != consumer_tag}
        self.forget(queue)

    def received(self, tag: int) -> None:
        """Note a basic.get delivery as held."""
        self.unsettled[tag] = ""

    def settled(self, tag: int) -> None:
        """Note a delivery as settled (acked or rejected): its consumer may be sent another."""
        consumer = self.unsettled.pop(tag, None)
        if consumer:
            self.outstanding[consumer] -= 1

    def buffered(self, queues: Sequence[str]) -> bool:
        return any(self.buffers.get(queue) for queue in queues)

    def wait_readable(self, seconds: float) -> None:
        """Block up to ``seconds`` until the socket has data or a delivery was buffered by another
        thread. Call WITHOUT the lock: other threads use the connection meanwhile."""
        sock = self.connection.sock
        pending = getattr(sock, "pending", None)
        if pending is not None and pending():  # pragma: no cover - TLS only; the test broker has no TLS listener
            return  # bytes TLS already decrypted are not readable on the socket
        try:
            select.select([sock, self._wake_read], [], [], seconds)
        except (OSError, ValueError, TypeError):  # pragma: no cover - closed by another thread during the wait
            return  # the next call under the lock finds the connection gone
        try:
            os.read(self._wake_read, 4096)  # what is left over only wakes the next wait early
        except BlockingIOError:
            pass

    def readable(self) -> bool:
        """Whether a frame may be waiting to be read: the socket (or TLS's decrypted bytes) has data."""
        sock = self.connection.sock
        pending = getattr(sock, "pending", None)
        if pending is not None and pending():  # pragma: no cover - TLS only; the test broker has no TLS listener
            return True
        return bool(select.select([sock], [], [], 0)[0])

    def drain(self) -> None:
        """Dispatch every frame already received, without waiting for more. Call under the lock."""
        for _ in range(PUMP_MAX_FRAMES):
            if not self.readable():
                break
            try:
                self.connection.drain_events(timeout=PUMP_READ_TIMEOUT)
            except TimeoutError:
                break

    @property
    def heartbeat(self) -> float:
        """The negotiated heartbeat interval in seconds (0: none)."""
        return float(self.connection.heartbeat or 0)

    def usable(self) -> bool:
        return (
            not self.closed
            and self.pid == os.getpid()
            and bool(self.connection.connected)
            and self.deliveries.is_open
            and self.publisher.is_open
        )

    def forget(self, queue: str) -> None:
        """Drop what this connection believes it declared for ``queue``: the next use redeclares."""
        self.declared.discard(queue)
        self.ladders.pop(queue, None)

    # -- heartbeats ---------------------------------------------------------------------------------

    def start_pump(self, lock: threading.RLock, on_failure: Callable[[Session, BaseException], None]) -> None:
        """Service heartbeats from a background thread whenever the lock is free (see HeartbeatPump)."""
        if self.heartbeat > 0:
            self._pump = HeartbeatPump(self, lock, on_failure)
            self._pump.start()

    def service(self) -> None:
        """Read whatever the broker sent (its heartbeats above all), then send ours when due.

        Called with the lock held. A frame that is not a heartbeat is dispatched as py-amqp
        always does: a channel or connection close raises here, and the caller discards us.
        """
        self.drain()
        # rate=4: send when a quarter interval passed without traffic; raises ConnectionForced when
        # nothing came from the broker for two intervals.
        self.connection.heartbeat_tick(rate=4)

    # -- closing ------------------------------------------------------------------------------------

    def close(self, *, graceful: bool) -> None:
        """Close the connection (the broker requeues every unsettled delivery). Call under the lock.

        Graceful: connection.close and its close-ok, bounded by OPERATION_TIMEOUT; otherwise, or
        when that fails, the socket is just shut.
        """
        if self.closed:
            return
        self.closed = True
        if self.pid != os.getpid():
            return  # inherited through fork(): shutting the socket would end the parent's connection
        if self._pump is not None:
            self._pump.stop()
        os.close(self._wake_read)
        os.close(self._wake_write)
        if graceful:
            try:
                self.connection.close()
                return
            except Exception as exc:  # a dead socket: shutting it is all that is left to do
                logger.debug("RabbitMQ connection close failed (%s); shutting the socket", type(exc).__name__)
        self.connection.collect()  # py-amqp swallows the socket's errors and skips what is already torn down

    def join_pump(self, timeout: float) -> None:
        """Wait for the pump thread to end (it does within one tick of close())."""
        pump = self._pump
        if pump is not None and pump.ident != threading.get_ident():
            pump.join(timeout)


class HeartbeatPump(threading.Thread):
    """Keeps a Session's heartbeats flowing while nobody else uses its connection.

    Contract, "Backend mechanisms: RabbitMQ": a job running longer than the heartbeat interval
    must keep its connection, and with it its delivery, which the channel holds until acked. The
    worker's renewal heartbeat runs only for a RenewableQueue, so this thread does the AMQP side:
    every quarter interval (at most every second) it takes the queue's lock, drains incoming
    frames and sends a heartbeat frame when one is due. Python threads interleave under the GIL,
    so even a CPU-bound handle() does not starve it.
    """

    def __init__(
        self, session: Session, lock: threading.RLock, on_failure: Callable[[Session, BaseException], None]
    ) -> None:
        super().__init__(name="kinetis-queue-rabbitmq-heartbeat", daemon=True)
        self._session = session
        self._lock = lock
        self._on_failure = on_failure
        self._stopped = threading.Event()
        self.interval = min(1.0, session.heartbeat / 4)

    def stop(self) -> None:
        self._stopped.set()

    def run(self) -> None:
        while not self._stopped.wait(self.interval):
            # Busy lock: another thread is mid-operation, and its traffic counts as a heartbeat.
            if not self._lock.acquire(timeout=self.interval):
                continue
            try:
                if self._session.closed:  # pragma: no cover - closed between the stop flag's check and the lock
                    return
                self._session.service()
            except BaseException as exc:
                self._on_failure(self._session, exc)
                return
            finally:
                self._lock.release()
