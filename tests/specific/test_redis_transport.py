"""Redis transport failures: a command is never re-sent, and the error says whether it was sent.

Contract, "Failure vocabulary": ConnectionFailedError when a command was never dispatched (the
server is unchanged), OutcomeUnknownError when it was written and no reply came. The tests count
what reaches the server: a TCP proxy in front of it records every command a client sends and can
swallow the replies (a lost reply), and a private ``redis-server`` on a free port is paused or
killed where the test needs to hurt the server itself.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from kinetis_queue.backends.redis import RedisQueue
from kinetis_queue.backends.redis.scripts import PUSH_MANY, Script
from kinetis_queue.exceptions import ConnectionFailedError, OutcomeUnknownError
from tests.jobs import Noop, Records
from tests.support.helpers import wait_until

#: Short enough that a swallowed reply fails fast, long enough for a loaded machine to answer.
SOCKET_TIMEOUT = 1.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RedisServer:
    """A private redis-server on a free port, which a test may pause, kill and start again."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None
        #: A plain client to look at the server from outside the queue.
        self.admin = redis.Redis.from_url(self.url, socket_timeout=10)

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
            ],
            stdout=subprocess.DEVNULL,
        )
        wait_until(lambda: _answers(self.admin), timeout=20)

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=20)

    def calls(self, command: str) -> int:
        """How many times the server ran ``command`` (INFO commandstats)."""
        stats = self.admin.info("commandstats").get(f"cmdstat_{command.lower()}")
        return int(stats["calls"]) if stats else 0


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed; install it with: apt-get install redis-server", pytrace=False)
    private = RedisServer(tmp_path)
    private.start()
    yield private
    private.admin.close()
    if private.process is not None and private.process.poll() is None:
        private.kill()


class Proxy:
    """A TCP proxy to ``port`` that records every byte clients send and can lose the replies in flight."""

    def __init__(self, port: int) -> None:
        self.upstream = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.sent = bytearray()
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []  # each client connection's socket toward the client
        self._losing: set[socket.socket] = set()
        self._sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def lose_replies(self) -> None:
        """From now on, every connection already open gets no reply again; new connections work."""
        with self._lock:
            self._losing.update(self._open)

    def count(self, command: str) -> int:
        """How many times clients sent ``command`` through the proxy."""
        name = command.upper().encode()
        with self._lock:
            return bytes(self.sent).count(b"$%d\r\n%s\r\n" % (len(name), name))

    def count_script(self, script: Script) -> int:
        """How many times clients sent ``EVALSHA`` of ``script`` through the proxy (refused ones too)."""
        with self._lock:
            return bytes(self.sent).count(b"$40\r\n%s\r\n" % script.sha.encode())

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
            with self._lock:
                self._open.append(client)
                self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, client), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, client), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, client: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                with self._lock:
                    if source is client:
                        self.sent += data
                    elif client in self._losing:
                        continue
                target.sendall(data)
        except OSError:
            pass
        for sock in (source, target):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.fixture
def proxy(server: RedisServer) -> Iterator[Proxy]:
    front = Proxy(server.port)
    yield front
    front.close()


@pytest.fixture
def queue_name() -> str:
    return "q" + uuid.uuid4().hex[:20]


def _queue(url: str, **kwargs: Any) -> RedisQueue:
    return RedisQueue(url=url, socket_timeout=SOCKET_TIMEOUT, **kwargs)


def test_a_push_whose_reply_is_lost_is_outcome_unknown_and_never_re_sent(
    server: RedisServer, proxy: Proxy, queue_name: str
) -> None:
    """Contract: Failure vocabulary (OutcomeUnknown: written, no reply); DESIGN.md §7 (never re-sent)."""
    queue = _queue(proxy.url)
    queue.push(Noop(), queue=queue_name)
    proxy.lose_replies()

    with pytest.raises(OutcomeUnknownError):
        queue.push(Records("secret-argument"), queue=queue_name)

    # It reached the server once, which applied it once: the outcome was unknown, not a failure.
    assert proxy.count("LPUSH") == 2
    assert server.calls("LPUSH") == 2
    assert server.admin.llen(queue.keys(queue_name).pending) == 2
    queue.push(Noop(), queue=queue_name)  # the next command opens a fresh connection, and works
    assert proxy.count("LPUSH") == 3
    assert server.admin.llen(queue.keys(queue_name).pending) == 3
    queue.dispose()


def test_the_proxy_sees_the_re_sends_of_redis_py_left_at_its_defaults(server: RedisServer, proxy: Proxy) -> None:
    """The control for the test above: redis-py's default retry re-sends a command whose reply was lost."""
    client = redis.Redis(host="127.0.0.1", port=proxy.port, socket_timeout=0.1)  # Redis()'s default Retry
    client.ping()
    proxy.lose_replies()

    client.lpush("kinetis_test_control", "x")  # the reply was lost, the retry on a new connection answered

    assert proxy.count("LPUSH") == server.calls("LPUSH") == 2
    assert server.admin.llen("kinetis_test_control") == 2  # one push call, two jobs
    client.close()


def test_a_reserve_whose_reply_is_lost_leaves_the_job_leased_until_its_lease_expires(
    server: RedisServer, proxy: Proxy, queue_name: str
) -> None:
    """Contract: Backend mechanisms: Redis (a reserve whose reply is lost can leave a job leased to no worker
    until its lease expires); recovered with attempts + 1."""
    queue = _queue(proxy.url, visibility_timeout=1)
    assert queue.pop(0.01, [queue_name]) is None  # the sweep script is loaded
    job_id = queue.push(Noop(), queue=queue_name)
    sweeps = proxy.count("EVALSHA")
    proxy.lose_replies()

    with pytest.raises(OutcomeUnknownError):
        queue.pop(5, [queue_name])

    assert proxy.count("EVALSHA") == sweeps + 1  # one sweep, not repeated
    direct = server.admin
    keys = queue.keys(queue_name)
    assert (direct.llen(keys.pending), direct.zcard(keys.leased)) == (0, 1)
    again = queue.pop(10, [queue_name])
    assert again is not None and (again.id, again.attempts) == (job_id, 2)
    queue.ack(again)
    assert queue.size(queue_name) == 0
    queue.dispose()


def test_an_ack_whose_reply_is_lost_is_outcome_unknown_and_sent_once(
    server: RedisServer, proxy: Proxy, queue_name: str
) -> None:
    queue = _queue(proxy.url)
    queue.push(Noop(), queue=queue_name)
    job = queue.pop(5, [queue_name])
    assert job is not None
    proxy.lose_replies()

    with pytest.raises(OutcomeUnknownError):
        queue.ack(job)

    assert (proxy.count("ZREM"), server.calls("ZREM")) == (1, 1)
    assert server.admin.zcard(queue.keys(queue_name).leased) == 0  # it was applied
    queue.dispose()


def test_a_push_to_a_server_that_is_not_there_failed_to_connect(queue_name: str) -> None:
    """Contract: Failure vocabulary (ConnectionFailed: never dispatched; the message holds no argument value)."""
    queue = _queue(f"redis://127.0.0.1:{_free_port()}/0")

    with pytest.raises(ConnectionFailedError) as raised:
        queue.push(Records("secret-argument"), queue=queue_name)

    assert "secret-argument" not in str(raised.value)
    queue.dispose()


def test_a_killed_server_fails_the_next_command_as_never_sent_and_the_queue_recovers(
    server: RedisServer, queue_name: str
) -> None:
    """A connection the server dropped is found closed before anything is written: ConnectionFailedError."""
    queue = _queue(server.url)
    queue.push(Noop(), queue=queue_name)
    server.kill()

    with pytest.raises(ConnectionFailedError):
        queue.push(Noop(), queue=queue_name)

    server.start()  # same port, empty: the failed push was never stored anywhere
    queue.push(Noop(), queue=queue_name)
    assert queue.size(queue_name) == 1
    assert server.calls("LPUSH") == 1
    queue.dispose()


def test_a_paused_server_makes_a_push_outcome_unknown_and_it_is_not_repeated(
    server: RedisServer, queue_name: str
) -> None:
    """CLIENT PAUSE holds the written command past the socket timeout: OutcomeUnknownError, no second LPUSH."""
    queue = _queue(server.url)
    queue.size(queue_name)  # connected and the size script loaded before the pause
    admin = server.admin
    admin.execute_command("CLIENT", "PAUSE", 2000, "ALL")  # holds every client, this one's next command too

    with pytest.raises(OutcomeUnknownError):
        queue.push(Noop(), queue=queue_name)

    wait_until(lambda: admin.ping(), timeout=20)  # the pause is over
    stored = admin.llen(queue.keys(queue_name).pending)
    assert server.calls("LPUSH") == stored <= 1
    queue.dispose()


def test_scripts_are_loaded_once_and_run_by_sha(server: RedisServer, queue_name: str) -> None:
    """DESIGN notes: register scripts once so the hot path is EVALSHA; the KEYS command is never sent."""
    queue = _queue(server.url)
    for _ in range(20):
        queue.push(Noop(), queue=queue_name)
        job = queue.pop(5, [queue_name])
        assert job is not None
        queue.ack(job)

    assert server.calls("SCRIPT|LOAD") == 1  # the sweep, on its first NOSCRIPT
    assert server.calls("EVALSHA") == 21  # 20 sweeps, plus the one the server refused
    assert server.calls("EVAL") == server.calls("KEYS") == 0

    server.admin.script_flush()  # a restart or a flush forgets the scripts: loaded again, once
    queue.push(Noop(), queue=queue_name)
    job = queue.pop(5, [queue_name])
    assert job is not None
    assert server.calls("SCRIPT|LOAD") == 2
    queue.dispose()


def test_a_batch_whose_reply_is_lost_was_sent_once_and_stored_whole(
    server: RedisServer, proxy: Proxy, queue_name: str
) -> None:
    """push_many() is one command (one script call for a mixed batch): a lost reply is OutcomeUnknownError,
    and the server ran it whole, once."""
    queue = _queue(proxy.url)
    queue.send_many([queue.prepare(Noop(), queue=queue_name), queue.prepare(Noop(), delay=60, queue=queue_name)])
    proxy.lose_replies()

    with pytest.raises(OutcomeUnknownError):
        queue.push_many([Records(f"job-{i}") for i in range(100)], queue=queue_name)

    assert proxy.count_script(PUSH_MANY) == 2  # the mixed batch's refused and run calls
    assert proxy.count("LPUSH") == 1  # this batch: one LPUSH of 100, sent once
    assert server.admin.llen(queue.keys(queue_name).pending) == 101
    queue.dispose()


def test_a_batch_refused_for_memory_stores_nothing(server: RedisServer, queue_name: str) -> None:
    """Out of memory (noeviction), a script is refused at its first write: no job of the batch is stored."""
    queue = _queue(server.url)
    queue.push(Noop(), queue=queue_name)
    server.admin.config_set("maxmemory", 1)
    try:
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            queue.push_many([Noop() for _ in range(10)], queue=queue_name)
    finally:
        server.admin.config_set("maxmemory", 0)
    assert server.admin.llen(queue.keys(queue_name).pending) == 1
    queue.dispose()


def test_a_server_killed_during_a_wait_fails_the_pop_at_its_next_sweep(server: RedisServer, queue_name: str) -> None:
    """A transport failure in the wait (BLMOVE) only ends that pause: the next sweep finds the server gone
    and the pop raises ConnectionFailedError (nothing was sent), rather than waiting on or hiding it."""
    queue = _queue(server.url)
    assert queue.pop(0.01, [queue_name]) is None  # connected, the sweep script loaded
    waiting = threading.Event()
    wait_any = queue._client.wait_any

    def spy(*args: Any, **kwargs: Any) -> Any:
        waiting.set()
        return wait_any(*args, **kwargs)

    queue._client.wait_any = spy  # type: ignore[method-assign]
    outcome: list[BaseException | None] = []

    def pop() -> None:
        try:
            queue.pop(30, [queue_name])
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=pop)
    thread.start()
    assert waiting.wait(30)
    server.kill()
    thread.join(60)

    assert len(outcome) == 1 and isinstance(outcome[0], ConnectionFailedError)
    queue.dispose()
