"""The Redis client's own connection handling under real faults (kinetis_queue/backends/redis/client.py).

- After a fork, the child never writes on the parent's sockets: it opens connections of its own.
- A command whose write fails (the connection's socket broken on this side, after the checks made before
  writing) is ConnectionFailedError: never sent, the server unchanged, and the next command works.
- A script whose load (after NOSCRIPT) gets no reply is ConnectionFailedError: the script itself was never
  sent. A TCP proxy drops every reply from the moment the SCRIPT LOAD passes through it.

Each test runs against a private redis-server (tests/specific/test_redis_transport.py's RedisServer).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.connection import Connection as RedisPyConnection

from kinetis_queue.backends.redis.client import Connection, RedisClient, connection_factory
from kinetis_queue.backends.redis.scripts import Script
from kinetis_queue.exceptions import ConnectionFailedError
from tests.specific.test_redis_transport import RedisServer
from tests.support.helpers import exit_forked_child

#: Short enough that a lost reply fails fast, long enough for a loaded machine to answer.
SOCKET_TIMEOUT = 1.0
#: A script whose effect shows whether it ran: it counts its runs in KEYS[1].
COUNTER_TEXT = "return redis.call('INCR', KEYS[1])"
COUNTER = Script("counter", COUNTER_TEXT, hashlib.sha1(COUNTER_TEXT.encode(), usedforsecurity=False).hexdigest())


@pytest.fixture
def private_server(tmp_path: Path) -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed; install it with: apt-get install redis-server", pytrace=False)
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.admin.close()
    if server.process is not None and server.process.poll() is None:
        server.kill()


class Recording:
    """A connection factory for RedisClient that keeps every connection it made (to reach their sockets)."""

    def __init__(self, url: str) -> None:
        self._factory = connection_factory(url, {}, SOCKET_TIMEOUT)
        self.made: list[Connection] = []

    def __call__(self) -> Connection:
        conn = self._factory()
        self.made.append(conn)
        return conn


def test_a_forked_child_opens_connections_of_its_own(private_server: RedisServer) -> None:
    client = RedisClient(connection_factory(private_server.url, {}, SOCKET_TIMEOUT))
    parent_id = client.execute("CLIENT", "ID")
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        # Python warns that forking a process with threads may deadlock the child; this child only
        # runs one command with its own new connection and exits.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: reports through the pipe, leaves with os._exit (no pytest teardown)
        code = 1
        try:
            os.write(write_end, b"%d" % client.execute("CLIENT", "ID"))
            code = 0
        finally:
            exit_forked_child(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        child_id = int(pipe.read() or b"-1")
    assert os.waitpid(pid, 0)[1] == 0
    assert child_id not in (parent_id, -1)  # a connection of its own, not the parent's socket
    assert client.execute("CLIENT", "ID") == parent_id  # the parent's connection, undisturbed
    client.close()


class LosingProxy:
    """A TCP proxy to ``port`` that drops every reply on a connection once ``trigger`` has passed through it
    (checked before the bytes are forwarded, so the reply to the triggering command is the first lost).

    It never closes a connection when a client stops sending: only a test's own fault ends one."""

    def __init__(self, port: int, trigger: bytes | None) -> None:
        self.upstream = port
        self.trigger = trigger
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"redis://127.0.0.1:{self.listener.getsockname()[1]}/0"
        self._sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream))
            self._sockets += [client, upstream]
            losing = threading.Event()
            threading.Thread(target=self._up, args=(client, upstream, losing), daemon=True).start()
            threading.Thread(target=self._down, args=(upstream, client, losing), daemon=True).start()

    def _up(self, client: socket.socket, upstream: socket.socket, losing: threading.Event) -> None:
        sent = bytearray()
        try:
            while data := client.recv(65536):
                sent += data
                if self.trigger is not None and self.trigger in sent:
                    losing.set()
                upstream.sendall(data)
        except OSError:
            pass

    def _down(self, upstream: socket.socket, client: socket.socket, losing: threading.Event) -> None:
        try:
            while data := upstream.recv(65536):
                if not losing.is_set():
                    client.sendall(data)
        except OSError:
            pass


def test_a_script_load_without_a_reply_is_a_script_never_sent(private_server: RedisServer) -> None:
    proxy = LosingProxy(private_server.port, b"$4\r\nLOAD\r\n")
    client = RedisClient(connection_factory(proxy.url, {}, SOCKET_TIMEOUT))
    try:
        with pytest.raises(ConnectionFailedError, match=r"^Redis counter script was not sent: loading it failed \("):
            client.script(COUNTER, ["kq-client-counter"], [])

        assert private_server.calls("SCRIPT|LOAD") == 1  # the load reached the server; its reply did not
        assert private_server.calls("EVALSHA") == 1  # the one refused with NOSCRIPT, nothing after it
        assert private_server.admin.exists("kq-client-counter") == 0  # the script never ran
    finally:
        client.close()
        proxy.close()


def test_a_command_whose_write_fails_is_never_sent_and_the_next_one_works(private_server: RedisServer) -> None:
    # Through a proxy that stays silent when this side stops writing (a server would close the connection,
    # which the client notices before writing): the broken socket is found only by the write itself.
    proxy = LosingProxy(private_server.port, None)
    factory = Recording(proxy.url)
    client = RedisClient(factory)
    assert client.execute("PING") == b"PONG"
    [conn] = factory.made
    assert isinstance(conn, RedisPyConnection)
    sock = conn._sock
    assert sock is not None
    sock.shutdown(socket.SHUT_WR)  # still readable and quiet, so it looks usable; any write fails

    with pytest.raises(ConnectionFailedError, match=r"^Redis SET was not sent: the write failed \("):
        client.execute("SET", "kq-client-write", "1")

    assert private_server.calls("SET") == 0
    assert private_server.admin.exists("kq-client-write") == 0
    assert client.execute("SET", "kq-client-write", "2") == b"OK"  # reconnected
    assert private_server.admin.get("kq-client-write") == b"2"
    client.close()
    proxy.close()


def test_a_forked_child_waits_on_connections_of_its_own(private_server: RedisServer) -> None:
    """wait_any() (the idle wait's BLMOVE) after a fork: the child opens a connection of its own."""
    client = RedisClient(connection_factory(private_server.url, {}, SOCKET_TIMEOUT))
    parent_id = client.execute("CLIENT", "ID")  # the parent's connection, now idle
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # as in the test above: the child runs one command
        pid = os.fork()
    if pid == 0:
        code = 1
        try:
            [child_id] = client.wait_any([("CLIENT", "ID")], SOCKET_TIMEOUT, what="wait")
            os.write(write_end, b"%d" % child_id)
            code = 0
        finally:
            exit_forked_child(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        child_id = int(pipe.read() or b"-1")
    assert os.waitpid(pid, 0)[1] == 0
    assert child_id not in (parent_id, -1)
    assert client.execute("CLIENT", "ID") == parent_id
    client.close()


def test_a_wait_whose_write_fails_is_never_sent_and_the_next_one_works(private_server: RedisServer) -> None:
    """wait_any(): a BLMOVE whose write fails is ConnectionFailedError (never sent); the next wait reconnects."""
    proxy = LosingProxy(private_server.port, None)
    factory = Recording(proxy.url)
    client = RedisClient(factory)
    assert client.execute("PING") == b"PONG"
    [conn] = factory.made
    assert isinstance(conn, RedisPyConnection)
    sock = conn._sock
    assert sock is not None
    sock.shutdown(socket.SHUT_WR)  # quiet and readable: only the write finds it broken
    key = "kq-client-wait"
    blmove = ("BLMOVE", key, key, "RIGHT", "RIGHT", "0.5")

    with pytest.raises(ConnectionFailedError, match=r"^Redis wait was not sent: the write failed \("):
        client.wait_any([blmove], SOCKET_TIMEOUT, what="wait")

    assert private_server.calls("BLMOVE") == 0
    private_server.admin.rpush(key, b"job")
    assert client.wait_any([blmove], SOCKET_TIMEOUT, what="wait") == [b"job"]  # reconnected, answered at once
    assert private_server.calls("BLMOVE") == 1
    assert private_server.admin.lrange(key, 0, -1) == [b"job"]  # moved onto itself: nothing consumed
    client.close()
    proxy.close()
