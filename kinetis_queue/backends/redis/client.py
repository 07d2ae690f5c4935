"""The queue's own connections to one Redis server; a command is never re-sent.

A standalone server uses RedisClient directly; a cluster routes to one RedisClient per master
(cluster.py), and a Sentinel-managed master uses one whose connections ask the sentinels (sentinel.py).

redis-py retries a command on a connection error by default, which can push a job twice or
reserve it twice when only the reply was lost (DESIGN.md §7). This client drives its connections
itself, one command at a time, so the phase a failure happened in is known:

- before the command was written (connect, handshake, a write that could not complete):
  ``ConnectionFailedError``, and the server state is unchanged (a partly written command is never
  completed, since its connection is closed);
- after it was written (reply timed out, connection lost while waiting): ``OutcomeUnknownError``,
  and the command may or may not have been applied.

Neither is retried. Connections are also built with ``Retry(NoBackoff(), 0)``, so redis-py itself
repeats nothing either, not even a connect.
"""

from __future__ import annotations

import os
import re
import select
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Protocol

import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.exceptions import NoScriptError
from redis.retry import Retry

from kinetis_queue.backends.redis.options import DJANGO_REDIS
from kinetis_queue.backends.redis.scripts import Script
from kinetis_queue.exceptions import ConnectionFailedError, OutcomeUnknownError

#: Seconds a connect, a write or a reply may take before the operation fails (SOCKET_TIMEOUT).
DEFAULT_SOCKET_TIMEOUT = 5.0
#: Connection options the queue imposes whatever the URL or a cache's OPTIONS say: nothing is
#: retried, replies stay bytes (a handle is the exact stored envelope), RESP2 reply shapes.
FORCED_OPTIONS: dict[str, Any] = {
    "retry": Retry(NoBackoff(), 0),
    "retry_on_error": [],
    "retry_on_timeout": False,
    "decode_responses": False,
    "protocol": 2,
}
#: OPTIONS of Django's RedisCache that configure the cache rather than the connection.
CACHE_ONLY_OPTIONS = frozenset({"serializer", "pool_class", "parser_class"})
#: django-redis OPTIONS that carry connection settings, and the redis-py argument each one is.
DJANGO_REDIS_OPTIONS = {
    "PASSWORD": "password",
    "SOCKET_TIMEOUT": "socket_timeout",
    "SOCKET_CONNECT_TIMEOUT": "socket_connect_timeout",
}

_Errors = (redis.ConnectionError, redis.TimeoutError)


class Connection(Protocol):
    """The part of a redis-py connection (``redis.connection.AbstractConnection``) this client uses."""

    def connect(self) -> None: ...
    def can_read(self, timeout: float = 0) -> bool: ...
    def disconnect(self) -> None: ...
    def send_command(self, *args: Any) -> None: ...

    #: The socket (redis-py's own attribute): wait_any() selects on several at once.
    _sock: Any

    def read_response(self) -> Any: ...


def cache_connection(alias: str) -> tuple[str, dict[str, Any]]:
    """The URL and redis-py connection options of the Redis cache ``alias`` in CACHES.

    Django's RedisCache writes to the first server of its LOCATION (the others are read replicas),
    so the queue uses that one. Django's OPTIONS are connection-pool arguments except the cache's
    own serializer, pool_class and parser_class; django-redis's are read from PASSWORD,
    SOCKET_TIMEOUT, SOCKET_CONNECT_TIMEOUT and CONNECTION_POOL_KWARGS. conf.py validated the alias.
    """
    cache = settings.CACHES[alias]
    location = cache["LOCATION"]
    servers = re.split("[;,]", location) if isinstance(location, str) else list(location)
    options: Mapping[str, Any] = cache.get("OPTIONS") or {}
    if cache["BACKEND"] == DJANGO_REDIS:
        kwargs = {DJANGO_REDIS_OPTIONS[key]: value for key, value in options.items() if key in DJANGO_REDIS_OPTIONS}
        kwargs.update(options.get("CONNECTION_POOL_KWARGS") or {})
    else:
        kwargs = {key: value for key, value in options.items() if key not in CACHE_ONLY_OPTIONS}
    return servers[0].strip(), kwargs


def connection_factory(url: str, options: Mapping[str, Any], socket_timeout: float | None) -> Callable[[], Connection]:
    """What opens a connection to ``url`` (redis-py's own URL parsing); no I/O happens here.

    Precedence, lowest first: DEFAULT_SOCKET_TIMEOUT, ``options`` (a cache's), the URL's query
    string, an explicit ``socket_timeout`` (the connection's SOCKET_TIMEOUT), FORCED_OPTIONS.
    """
    kwargs = {"socket_timeout": DEFAULT_SOCKET_TIMEOUT, "socket_connect_timeout": DEFAULT_SOCKET_TIMEOUT, **options}
    pool = redis.ConnectionPool.from_url(url, **kwargs)
    if socket_timeout is not None:
        pool.connection_kwargs.update(socket_timeout=socket_timeout, socket_connect_timeout=socket_timeout)
    pool.connection_kwargs.update(FORCED_OPTIONS)
    return partial(pool.connection_class, **pool.connection_kwargs)


class RedisClient:
    """Runs one command at a time on a connection of its own; thread-safe.

    Idle connections wait in a list: a command takes one (or opens one), and puts it back when it
    has its reply, so there are never more connections than concurrent commands. This is a pool
    without redis-py's ConnectionPool bookkeeping (locks, pid checks, metrics), which costs a large
    share of a command's time on a local server (``python -m bench.redis`` shows it). A connection
    found closed or holding unread data is reopened before anything is
    written, as redis-py's pool does.

    A blocking command (``wait_any()``: BLMOVE) holds its connection, like any command, while it
    blocks on the server, so it never delays another thread's command; its reply is awaited for
    ``reply_within`` seconds (longer than the block) instead of the socket timeout, which may be
    shorter than the block.

    Thread safety: a connection is used by one thread at a time (taken from an idle list with
    ``list.pop()``, given back with ``list.append()``, each atomic), and the lists of opened
    connections change under a lock; ``tests/specific/test_redis_threads.py`` hammers it.
    """

    def __init__(self, factory: Callable[[], Connection]) -> None:
        self._factory = factory
        self._idle: list[Connection] = []
        self._opened: list[Connection] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._wait: tuple[int, int] | None = None

    def execute(self, *args: Any, what: str | None = None, durable: bool = False) -> Any:
        """Send one command and return its raw reply; never re-sent (see the module docstring).

        ``durable`` (a push): then wait, on the same connection, for the replicas ``replicate()`` set
        to have it (Redis ``WAIT``), else raise OutcomeUnknownError; without replicas set, nothing more.
        """
        what = what or str(args[0])
        if self._pid != os.getpid():
            self._forget()  # forked: the parent's sockets are the parent's
        idle = self._idle  # where the connection goes back to: close() starts a new list
        conn = self._take(idle, what)
        answered = False
        try:
            try:
                conn.send_command(*args)
            except _Errors as exc:
                raise ConnectionFailedError(f"Redis {what} was not sent: the write failed ({exc})") from exc
            try:
                reply = conn.read_response()
            except redis.ResponseError:
                answered = True  # an error reply is a whole reply: the connection is clean
                raise
            except _Errors as exc:
                raise OutcomeUnknownError(
                    f"Redis {what} was sent and no reply came ({exc}); it may or may not have been applied"
                ) from exc
            if durable and self._wait is not None:
                self._await_replicas(conn, what)
            answered = True
            return reply
        finally:
            self._give_back(idle, conn, answered)

    def replicate(self, replicas: int, timeout: float) -> None:
        """Make every durable command wait for ``replicas`` replicas, for ``timeout`` seconds at most (0: no wait)."""
        self._wait = (replicas, max(1, round(timeout * 1000))) if replicas > 0 else None

    def _await_replicas(self, conn: Connection, what: str) -> None:
        """``WAIT replicas timeout`` after an applied command: OutcomeUnknownError when fewer had it in time
        (it is on the master, and a failover before it replicates would lose it)."""
        assert self._wait is not None
        replicas, timeout_ms = self._wait
        try:
            conn.send_command("WAIT", replicas, timeout_ms)
            count = int(conn.read_response())
        except (*_Errors, redis.ResponseError) as exc:
            conn.disconnect()
            raise OutcomeUnknownError(
                f"Redis {what} was applied on the master and its replication could not be confirmed ({exc})"
            ) from exc
        if count < replicas:
            raise OutcomeUnknownError(
                f"Redis {what} was applied on the master but reached {count} of {replicas} replica(s) within "
                f"{timeout_ms} ms (WAIT_REPLICAS): a failover before it replicates would lose it"
            )

    def wait_any(self, commands: Sequence[Sequence[Any]], reply_within: float, what: str) -> list[Any]:
        """Send each blocking command on a connection of its own; return the replies read once one or
        more of them have replied, or ``[]`` when none did within ``reply_within`` seconds. Never re-sent.

        A connection whose reply was not read (its command still
        blocked on the server) is closed, so no later command can read that reply as its own.
        ConnectionFailedError when a command could not be sent, OutcomeUnknownError when reading
        failed.
        """
        if self._pid != os.getpid():
            self._forget()
        idle = self._idle
        sent: list[Connection] = []
        answered: set[int] = set()
        try:
            for command in commands:
                conn = self._take(idle, what)
                sent.append(conn)
                try:
                    conn.send_command(*command)
                except _Errors as exc:
                    raise ConnectionFailedError(f"Redis {what} was not sent: the write failed ({exc})") from exc
            try:
                if len(sent) == 1:
                    ready = [0] if sent[0].can_read(timeout=reply_within) else []
                else:
                    index = {conn._sock: number for number, conn in enumerate(sent)}
                    readable, _, _ = select.select(list(index), [], [], reply_within)
                    ready = [index[sock] for sock in readable]
                replies = []
                for number in ready:
                    replies.append(sent[number].read_response())
                    answered.add(number)
            except _Errors as exc:
                raise OutcomeUnknownError(f"Redis {what} was sent and its reply could not be read ({exc})") from exc
            return replies
        finally:
            for number, conn in enumerate(sent):
                self._give_back(idle, conn, number in answered)

    @staticmethod
    def _give_back(idle: list[Connection], conn: Connection, answered: bool) -> None:
        """Put ``conn`` back in ``idle``, closed first unless every reply it was sent for was read.

        redis-py closes a connection whose read or write failed, even on an exception raised in
        the middle (a signal handler's, such as the worker's job timeout). Between the write and
        the read nothing does: a reply still on its way there would be read by the connection's
        next command as its own, and ``_take``'s check cannot see a reply that has not come yet.
        """
        if not answered:
            conn.disconnect()
        idle.append(conn)

    def _take(self, idle: list[Connection], what: str) -> Connection:
        """An idle connection, connected and clean; ConnectionFailedError when none can be had."""
        try:
            conn = idle.pop()  # atomic (under the GIL, and per object without it), like append()
        except IndexError:
            conn = self._factory()
            with self._lock:
                self._opened.append(conn)
        try:
            conn.connect()  # returns at once when connected
            try:
                stale = conn.can_read()
            except _Errors:
                stale = True
            if stale:  # closed by the server, or a reply nobody read: start afresh
                conn.disconnect()
                conn.connect()
        except _Errors as exc:
            idle.append(conn)
            raise ConnectionFailedError(f"Redis {what} was not sent: no connection ({exc})") from exc
        return conn

    def _forget(self) -> None:
        with self._lock:
            self._idle, self._opened, self._pid = [], [], os.getpid()

    def script(self, script: Script, keys: Sequence[str], args: Sequence[Any], durable: bool = False) -> Any:
        """Run ``script`` by its SHA1 (EVALSHA), loading it first when the server does not know it."""
        what = f"{script.name} script"
        try:
            return self.execute("EVALSHA", script.sha, len(keys), *keys, *args, what=what, durable=durable)
        except NoScriptError:
            pass  # first use on this server, or after a restart or SCRIPT FLUSH: the script did not run
        try:
            self.execute("SCRIPT", "LOAD", script.text, what=f"load of the {what}")
        except OutcomeUnknownError as exc:
            # Loading is idempotent; what matters is that the script itself was never sent.
            raise ConnectionFailedError(f"Redis {what} was not sent: loading it failed ({exc})") from exc
        return self.execute("EVALSHA", script.sha, len(keys), *keys, *args, what=what, durable=durable)

    def close(self) -> None:
        """Close every connection this client opened (a later command opens a new one)."""
        with self._lock:
            opened, self._opened, self._idle = self._opened, [], []
        for conn in opened:
            conn.disconnect()
