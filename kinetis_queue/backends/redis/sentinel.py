"""The queue's connections to a master managed by Redis Sentinel: each new connection asks the sentinels
where the master is, so the client follows a failover.

redis-py's SentinelManagedConnection does the asking (SENTINEL get-master-addr-by-name, first sentinel
that answers) and turns a ``READONLY`` reply (the server it reached was demoted) into a connection error;
RedisClient drives those connections as it drives plain ones, so nothing is re-sent (client.py). After a
failure SentinelClient drops its idle connections: they may lead to the old master, and the next command
opens a new one wherever the sentinels say the master now is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from redis.connection import parse_url
from redis.sentinel import Sentinel, SentinelConnectionPool

from kinetis_queue.backends.redis.client import DEFAULT_SOCKET_TIMEOUT, FORCED_OPTIONS, Connection, RedisClient
from kinetis_queue.exceptions import ConnectionFailedError, OutcomeUnknownError

#: What a URL may say about a sentinel or the master besides where it is.
_SHARED = ("username", "password", "db", "socket_timeout", "socket_connect_timeout")


def sentinel_factory(
    sentinels: Sequence[str], service: str, options: Mapping[str, Any], socket_timeout: float | None
) -> Callable[[], Connection]:
    """What opens a connection to ``service``'s current master; no I/O happens here.

    The first sentinel URL's credentials, database and scheme (``rediss://``: TLS) apply to the master too
    (and to every sentinel).
    """
    parsed = [parse_url(url) for url in sentinels]  # type: ignore[no-untyped-call]
    timeout = DEFAULT_SOCKET_TIMEOUT if socket_timeout is None else socket_timeout
    common = {"socket_timeout": timeout, "socket_connect_timeout": timeout, **options}
    common.update({key: value for key, value in parsed[0].items() if key in _SHARED})
    if sentinels[0].startswith("rediss://"):
        common["ssl"] = True  # TLS to the sentinels and the master (SentinelManagedSSLConnection)
    sentinel_kwargs = {key: value for key, value in common.items() if key != "db"}
    manager = Sentinel(
        [(url["host"], url["port"]) for url in parsed], sentinel_kwargs=sentinel_kwargs, **common, **FORCED_OPTIONS
    )
    pool = SentinelConnectionPool(service, manager, **common, **FORCED_OPTIONS)  # type: ignore[no-untyped-call]
    connection_class: Callable[..., Connection] = pool.connection_class
    kwargs = pool.connection_kwargs
    return lambda: connection_class(**kwargs)


class SentinelClient(RedisClient):
    """A RedisClient whose connections follow the sentinels' master, dropping its idle ones after a failure."""

    def execute(self, *args: Any, what: str | None = None, durable: bool = False) -> Any:
        try:
            return super().execute(*args, what=what, durable=durable)
        except (ConnectionFailedError, OutcomeUnknownError):
            self.drop_idle()
            raise

    def wait_any(self, commands: Sequence[Sequence[Any]], reply_within: float, what: str) -> list[Any]:
        try:
            return super().wait_any(commands, reply_within, what)
        except (ConnectionFailedError, OutcomeUnknownError):
            self.drop_idle()
            raise

    def drop_idle(self) -> None:
        """Close the idle connections (a busy one is closed by its own failure, if it fails)."""
        while True:
            try:
                conn = self._idle.pop()
            except IndexError:
                return
            conn.disconnect()
            with self._lock:
                if conn in self._opened:
                    self._opened.remove(conn)
