"""Bounded waits for the worker's own database connection (the SQL backend's OPERATION_TIMEOUT).

The contract lets a call in flight run "to completion or to its transport's own timeout", so the
worker's connection needs one. MySQL/MariaDB clients have it: ``connect_timeout``,
``read_timeout`` and ``write_timeout``. libpq has only ``connect_timeout``; TCP keepalives and
``tcp_user_timeout`` let the kernel drop a connection whose peer vanished, but nothing bounds a
call whose bytes the peer's TCP stack acknowledges and nobody answers (a hung server, proxy or
pooler). For PostgreSQL, ``bounded()`` therefore registers each call with a watchdog thread that
shuts the call's socket down once its deadline passes: libpq sees the connection end, and the call
raises OperationalError (outcome unknown) instead of waiting forever.
"""

from __future__ import annotations

import itertools
import math
import os
import socket
import threading
import time
from types import TracebackType
from typing import Any

from django.db import DatabaseError, OperationalError
from django.db.backends.base.base import BaseDatabaseWrapper

#: Default seconds for one worker-side call (connect, claim, settlement, renewal): OPERATION_TIMEOUT.
DEFAULT_OPERATION_TIMEOUT = 30.0
#: How often the watchdog looks for overdue calls; a call is cut at most this much past its deadline.
TICK = 0.25


def client_options(vendor: str, seconds: float) -> dict[str, Any]:
    """Driver options bounding connects and reads/writes; the alias's own OPTIONS win over these."""
    whole = max(1, math.ceil(seconds))
    if vendor == "postgresql":
        probe = max(1, round(seconds / 4))  # idle, then 3 unanswered probes: the peer is gone after ~seconds
        return {
            "connect_timeout": max(2, whole),
            "keepalives": 1,
            "keepalives_idle": probe,
            "keepalives_interval": probe,
            "keepalives_count": 3,
            "tcp_user_timeout": int(seconds * 1000),
        }
    if vendor == "mysql":
        return {"connect_timeout": whole, "read_timeout": whole, "write_timeout": whole}
    return {}


class _Watchdog:
    """Shuts the socket of a registered call down once its deadline passes; one thread per process."""

    def __init__(self) -> None:
        self._calls: dict[int, tuple[float, int]] = {}
        self._lock = threading.Lock()
        self._keys = itertools.count()
        self._pid = 0

    def enter(self, fd: int, seconds: float) -> int:
        key = next(self._keys)
        with self._lock:
            self._calls[key] = (time.monotonic() + seconds, fd)
            if self._pid != os.getpid():  # first use, or a forked child: the thread is not there
                self._pid = os.getpid()
                threading.Thread(target=self._run, name="kinetis-queue-sql-watchdog", daemon=True).start()
        return key

    def leave(self, key: int) -> bool:
        """Unregister the call; True when the watchdog had already cut it."""
        with self._lock:
            return self._calls.pop(key, None) is None

    def _run(self) -> None:
        while True:
            time.sleep(TICK)
            now = time.monotonic()
            with self._lock:  # held while shutting, so the call cannot end and free its fd meanwhile
                for key, (deadline, fd) in list(self._calls.items()):
                    if deadline <= now:
                        del self._calls[key]
                        _shut(fd)


def _shut(fd: int) -> None:
    try:
        sock = socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM)  # a duplicate: closing it keeps fd
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()


_watchdog = _Watchdog()


class bounded:  # used like a function: ``with bounded(db, seconds):``
    """Run one worker-side call on ``db`` within ``seconds`` (PostgreSQL; other vendors bound themselves)."""

    __slots__ = ("db", "key", "seconds")

    def __init__(self, db: BaseDatabaseWrapper, seconds: float) -> None:
        self.db, self.seconds = db, seconds
        self.key: int | None = None

    def __enter__(self) -> None:
        if self.db.vendor == "postgresql" and self.db.connection is not None:
            try:
                fd = self.db.connection.fileno()  # psycopg 3 and 2
            except Exception:  # a connection libpq already closed: any call on it fails at once
                return
            self.key = _watchdog.enter(fd, self.seconds)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.key is None or not _watchdog.leave(self.key):
            return
        self.db.errors_occurred = True  # the socket is shut: the next use replaces the connection
        if isinstance(exc, DatabaseError):
            raise OperationalError(
                f"no reply from PostgreSQL within the connection's OPERATION_TIMEOUT ({self.seconds:g}s); "
                "the connection was closed, and the call may or may not have been applied"
            ) from exc
