"""The fault proxy itself, against a local echo server: each mode does what the scenarios rely on."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator

import pytest

from tests.faults.faultproxy import (
    Blackhole,
    CutAfter,
    FaultProxy,
    Latency,
    LimitBytes,
    Mute,
    PgFramer,
    Refuse,
    Reset,
)
from tests.support.helpers import wait_until

pytestmark = [pytest.mark.fault, pytest.mark.timeout(60)]


class _Echo(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        try:
            while data := self.request.recv(65536):
                self.request.sendall(data)
        except ConnectionError:  # the Reset fault's RST reached the server side too: the peer is gone
            pass  # (socketserver printed its traceback into a green run: fresh-clone run ci2)


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address  # type: ignore[misc]
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def proxy(echo: tuple[str, int]) -> Iterator[FaultProxy]:
    with FaultProxy(*echo) as running:
        yield running


def _client(proxy: FaultProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=2)


def _roundtrip(sock: socket.socket, data: bytes) -> bytes:
    sock.sendall(data)
    received = b""
    while len(received) < len(data):
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
    return received


def test_pass_and_latency(proxy: FaultProxy) -> None:
    with _client(proxy) as sock:
        assert _roundtrip(sock, b"ping") == b"ping"
        proxy.set(Latency(150))
        started = time.monotonic()
        assert _roundtrip(sock, b"slow") == b"slow"
        assert time.monotonic() - started >= 0.25  # both directions are delayed
    assert proxy.bytes_up == proxy.bytes_down == 8


def test_blackhole_swallows_and_never_answers(proxy: FaultProxy) -> None:
    with _client(proxy) as sock:
        proxy.set(Blackhole())
        sock.sendall(b"into the void")
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(10)


def test_mute_forwards_requests_and_swallows_the_replies(proxy: FaultProxy) -> None:
    with _client(proxy) as sock:
        assert _roundtrip(sock, b"ping") == b"ping"
        proxy.set(Mute())
        sock.sendall(b"heard")
        wait_until(lambda: proxy.bytes_up == 9)  # the server got it (and echoed it back)
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(10)
    assert proxy.bytes_down == 4


def test_reset_sends_an_rst_to_open_and_new_connections(proxy: FaultProxy) -> None:
    with _client(proxy) as sock:
        assert _roundtrip(sock, b"a") == b"a"
        proxy.set(Reset())
        with pytest.raises(ConnectionResetError):
            sock.sendall(b"b")
            sock.recv(10)
    # A new connection is reset too: the RST may land during connect() or on the first read.
    with pytest.raises(ConnectionResetError), _client(proxy) as sock:
        sock.recv(10)


def test_refuse_then_listen_again(proxy: FaultProxy) -> None:
    proxy.set(Refuse())
    with pytest.raises(ConnectionRefusedError):
        _client(proxy)
    proxy.set(LimitBytes(10**6))
    with _client(proxy) as sock:
        assert _roundtrip(sock, b"back") == b"back"


def test_limit_bytes_closes_the_connection(proxy: FaultProxy) -> None:
    proxy.set(LimitBytes(4))
    with _client(proxy) as sock:
        sock.sendall(b"12345678")
        received = b""
        while chunk := sock.recv(100):
            received += chunk
        assert len(received) <= 8


def test_cut_after_forwards_the_request_and_drops_the_reply(proxy: FaultProxy) -> None:
    proxy.set(CutAfter(b"DELETE", nth=2))
    with _client(proxy) as sock:
        assert _roundtrip(sock, b"DELETE 1") == b"DELETE 1"  # the first match passes
        sock.sendall(b"DELETE 2")
        assert sock.recv(100) == b""  # closed without the reply
    assert proxy.matched == 2 and proxy.cuts == 1
    assert proxy.bytes_up == 16 and proxy.bytes_down == 8


def test_pg_framer_splits_startup_and_typed_messages() -> None:
    startup = (8).to_bytes(4, "big") + (80877103).to_bytes(4, "big")  # SSLRequest
    params = b"user\x00postgres\x00\x00"
    startup += (8 + len(params)).to_bytes(4, "big") + (196608).to_bytes(4, "big") + params
    query = b"Q" + (4 + 9).to_bytes(4, "big") + b"COMMIT;\x00\x00"
    framer = PgFramer()
    messages = framer.feed(startup + query[:3]) + framer.feed(query[3:])
    assert [kind for kind, _, _ in messages] == [None, None, "Q"]
    assert CutAfter(rb"^COMMIT").matches("Q", messages[2][1])
    parse = b"\x00INSERT INTO t VALUES ($1)\x00\x00\x00"
    assert CutAfter(rb"^INSERT").matches("P", parse)
    assert not CutAfter(rb"^INSERT").matches("B", parse)
