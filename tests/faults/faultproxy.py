"""A small asyncio TCP fault proxy, driven in-process from a thread (RELIABILITY.md §2.2.3).

toxiproxy cannot be installed here, so this copies its vocabulary. A ``FaultProxy`` listens on an
ephemeral loopback port and forwards each connection to the real server, through the current mode:

==================  ==============================================================================
``Pass()``          forward unchanged
``Latency(ms, j)``  delay each chunk by ms +/- j milliseconds (order kept)
``Blackhole()``     accept, swallow, never answer (existing connections go silent too)
``Mute()``          forward what the client sends, swallow what the server answers: requests are
                    applied and their replies never come
``Reset()``         ``SO_LINGER 0`` then close: an RST, on every open and every new connection
``Refuse()``        stop listening: new connections are refused (existing ones keep going)
``LimitBytes(n)``   close a connection once n bytes went through it (both directions)
``CutAfter(m, n)``  forward the n-th client message matching ``m``, then drop everything the server
                    sends and close: the request is applied and its reply is lost
==================  ==============================================================================

With ``framing="pg"`` the client stream is split into PostgreSQL protocol messages, ``m`` is a
regular expression matched against a simple query (``Q``) or a Parse (``P``) message's statement
text, and a matched Parse is cut after the first Sync that follows an Execute (when the server has
executed and, in autocommit, committed it). With ``framing="raw"`` each chunk read is a message
(RESP commands fit one chunk) and ``m`` is matched against its bytes. ``matched`` counts the
matching messages that reached the server: "the server saw the command once" (``nth`` counts from
the ``set()`` of the mode).
"""

from __future__ import annotations

import asyncio
import random
import re
import socket
import struct
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.faults import history


@dataclass(frozen=True)
class Pass:
    pass


@dataclass(frozen=True)
class Latency:
    ms: float
    jitter_ms: float = 0


@dataclass(frozen=True)
class Blackhole:
    pass


@dataclass(frozen=True)
class Mute:
    pass


@dataclass(frozen=True)
class Reset:
    pass


@dataclass(frozen=True)
class Refuse:
    pass


@dataclass(frozen=True)
class LimitBytes:
    n: int


@dataclass(frozen=True)
class CutAfter:
    match: bytes
    nth: int = 1
    _pattern: re.Pattern[bytes] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_pattern", re.compile(self.match, re.IGNORECASE | re.DOTALL))

    def matches(self, kind: str | None, body: bytes) -> bool:
        if kind is not None and kind not in ("Q", "P"):
            return False
        if kind == "P":  # Parse: statement name, NUL, the statement text, NUL, ...
            body = body.split(b"\x00", 2)[1] if body.count(b"\x00") >= 2 else body
        return self._pattern.search(body) is not None


Mode = Pass | Latency | Blackhole | Mute | Reset | Refuse | LimitBytes | CutAfter

#: PostgreSQL's ReadyForQuery message: the server is done with everything sent before it.
READY_FOR_QUERY = re.compile(rb"Z\x00\x00\x00\x05[ITE]")
#: How long a cut connection waits for the server to finish before it is closed anyway.
CUT_GRACE = 3.0


class PgFramer:
    """Splits a PostgreSQL client stream into (type, body, raw) messages; start-up messages have no type."""

    def __init__(self) -> None:
        self.buffer = b""
        self.startup = True

    def feed(self, data: bytes) -> list[tuple[str | None, bytes, bytes]]:
        self.buffer += data
        out: list[tuple[str | None, bytes, bytes]] = []
        while True:
            if self.startup:
                if len(self.buffer) < 8:
                    break
                size = int.from_bytes(self.buffer[:4], "big")
                if len(self.buffer) < size:
                    break
                raw, self.buffer = self.buffer[:size], self.buffer[size:]
                out.append((None, raw[8:], raw))
                if int.from_bytes(raw[4:8], "big") == 196608:  # protocol 3.0: the StartupMessage
                    self.startup = False
            else:
                if len(self.buffer) < 5:
                    break
                size = int.from_bytes(self.buffer[1:5], "big") + 1
                if len(self.buffer) < size:
                    break
                raw, self.buffer = self.buffer[:size], self.buffer[size:]
                out.append((chr(raw[0]), raw[5:], raw))
        return out


class _Conn:
    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.server: asyncio.StreamWriter | None = None
        self.bytes = 0
        self.cut = False
        self.cut_pending = False
        self.executed = False
        self.after_cut = b""


def _abort(writer: asyncio.StreamWriter | None, *, rst: bool = False) -> None:
    if writer is None or writer.transport.is_closing():
        return
    if rst:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class FaultProxy:
    """One listening port in front of ``target``; ``set()`` changes the mode from any thread."""

    def __init__(self, host: str, port: int, *, framing: str = "raw", seed: int = 0) -> None:
        if framing not in ("raw", "pg"):
            raise ValueError("framing must be 'raw' or 'pg'")
        self.target = (host, port)
        self.framing = framing
        self.mode: Mode = Pass()
        self.port = 0
        self.matched = 0
        self.bytes_up = 0
        self.bytes_down = 0
        self.connections = 0
        self.cuts = 0
        self._mode_matches = 0
        self._rng = random.Random(seed)
        self._conns: set[_Conn] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="faultproxy", daemon=True)

    # -- control, from the test's thread --------------------------------------------------------

    def __enter__(self) -> FaultProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> int:
        self._thread.start()
        self._call(self._listen())
        return self.port

    @property
    def open_connections(self) -> int:
        """Client connections open right now (what a Reset would cut)."""
        return len(self._conns)

    def set(self, mode: Mode) -> None:
        """Switch modes; Reset and Blackhole also act on the connections already open."""
        history.record(f"fault.proxy.{type(mode).__name__.lower()}", None, port=self.port, mode=repr(mode))
        self._call(self._set(mode))

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def _call(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=30)

    # -- the loop's side --------------------------------------------------------------------------

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _set(self, mode: Mode) -> None:
        previous, self.mode = self.mode, mode
        self._mode_matches = 0
        if isinstance(mode, Refuse) and self._server is not None:
            # close() stops listening at once; wait_closed() would also wait (Python 3.12.1+) for every
            # open connection to end, which Refuse leaves alone.
            self._server.close()
            self._server = None
        elif not isinstance(mode, Refuse) and isinstance(previous, Refuse):
            await self._listen()
        if isinstance(mode, Reset):
            for conn in list(self._conns):
                _abort(conn.client, rst=True)
                _abort(conn.server, rst=True)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()  # not wait_closed(): it would wait for the connections aborted below
        for conn in list(self._conns):
            _abort(conn.client)
            _abort(conn.server)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = _Conn(writer)
        self._conns.add(conn)
        self.connections += 1
        try:
            await self._serve(conn, reader)
        except (OSError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            # close() cancels this handler; it ends here instead of cancelled, because on Python 3.12.1
            # asyncio's StreamReaderProtocol reads a cancelled handler's exception() in a callback, which
            # raises and is logged at ERROR ("Exception in callback ...") into whichever test is running.
            pass
        finally:
            self._conns.discard(conn)
            _abort(conn.client)
            _abort(conn.server)
            self._tasks.discard(task)

    async def _serve(self, conn: _Conn, reader: asyncio.StreamReader) -> None:
        if isinstance(self.mode, Reset):
            _abort(conn.client, rst=True)
            return
        if isinstance(self.mode, Blackhole):
            while await reader.read(65536):
                pass
            return
        server_reader, conn.server = await asyncio.open_connection(*self.target)
        down = asyncio.ensure_future(self._down(conn, server_reader))
        try:
            await self._up(conn, reader)
        finally:
            down.cancel()
            await asyncio.gather(down, return_exceptions=True)

    async def _delay(self) -> None:
        mode = self.mode
        if isinstance(mode, Latency):
            await asyncio.sleep(max(0.0, mode.ms + self._rng.uniform(-mode.jitter_ms, mode.jitter_ms)) / 1000)

    def _over_limit(self, conn: _Conn, size: int) -> bool:
        conn.bytes += size
        mode = self.mode
        return isinstance(mode, LimitBytes) and conn.bytes >= mode.n

    async def _up(self, conn: _Conn, reader: asyncio.StreamReader) -> None:
        framer = PgFramer() if self.framing == "pg" else None
        assert conn.server is not None
        while data := await reader.read(65536):
            if conn.cut or isinstance(self.mode, Blackhole):
                continue
            await self._delay()
            messages = framer.feed(data) if framer is not None else [(None, data, data)]
            for kind, body, raw in messages:
                self.bytes_up += len(raw)
                conn.server.write(raw)
                self._maybe_cut(conn, kind, body)
                if conn.cut:
                    break
            await conn.server.drain()
            if self._over_limit(conn, len(data)):
                return
        await asyncio.sleep(0)

    def _maybe_cut(self, conn: _Conn, kind: str | None, body: bytes) -> None:
        mode = self.mode
        if conn.cut_pending:
            # A Parse that only prepares (psycopg's prepare=True sends Parse+Sync first) has not run:
            # cut at the first Sync after an Execute.
            conn.executed = conn.executed or kind == "E"
            if kind == "S" and conn.executed:
                conn.cut, conn.cut_pending = True, False
            return
        if not isinstance(mode, CutAfter) or not mode.matches(kind, body):
            return
        self.matched += 1
        self._mode_matches += 1
        if self._mode_matches != mode.nth:
            return
        self.cuts += 1
        if kind == "P":
            conn.cut_pending = True  # executed (and, in autocommit, committed) at the next Sync
        else:
            conn.cut = True

    async def _down(self, conn: _Conn, reader: asyncio.StreamReader) -> None:
        cut_deadline: float | None = None
        loop = asyncio.get_running_loop()
        while True:
            timeout = None if cut_deadline is None else max(0.0, cut_deadline - loop.time())
            try:
                data = await asyncio.wait_for(reader.read(65536), timeout)
            except TimeoutError:
                break
            if not data:
                break
            if conn.cut:
                cut_deadline = cut_deadline or loop.time() + CUT_GRACE
                conn.after_cut += data
                if self.framing == "raw" or READY_FOR_QUERY.search(conn.after_cut):
                    break  # the server answered: it applied the request; the client never hears of it
                continue
            if isinstance(self.mode, (Blackhole, Mute)):
                continue
            await self._delay()
            self.bytes_down += len(data)
            conn.client.write(data)
            await conn.client.drain()
            if self._over_limit(conn, len(data)):
                break
        _abort(conn.client)
        _abort(conn.server)
