"""Poolers in front of PostgreSQL: which session state the SQL backend may leave, and where it gives it up.

A transaction pooler (PgBouncer's ``pool_mode = transaction``) lends a server connection for one
transaction at a time, so nothing that lives in a session survives from one transaction to the next,
and what one client leaves in a session reaches whichever client is lent that server connection next.
The backend has three session features:

- LISTEN: a notification goes to the server session that listened, which the pooler has since lent
  to someone else. Idle workers and outbox relays poll instead (the database's polling pause, as on
  MySQL); pushes still NOTIFY, for workers that reach the same database directly.
- The worker connection's ``SET`` commands (asynchronous commit, no sequential scans): a session
  setting would leak to other clients of the pool (their pushes would commit asynchronously, their
  queries would be planned without sequential scans). Set them on the worker's database role instead
  (docs/backends/pgbouncer.md).
- The prepared push INSERT: a named prepared statement lives in one server session.

An alias is taken as pooled when its DATABASES entry sets ``DISABLE_SERVER_SIDE_CURSORS = True``:
Django's own setting for a transaction pooler (a server-side cursor is session state too). That alone
is not certain (a project may not use ``.iterator()`` and so never set it), and the ``SET`` commands
are the one feature whose leak changes what other clients get, so they are set only where the worker's
connection is a server session of its own: the connection's SESSION_SETTINGS, or by default
``owns_its_session()``, which asks the server which socket it serves and compares it with this
client's own. Anything in between (a pooler, in any mode, or a proxy or NAT) makes them differ, and
then nothing is set.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from pathlib import Path
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

#: What the server says about the session's client and itself (addresses NULL over a Unix socket).
SERVER_SIDE = (
    "SELECT host(inet_client_addr()), inet_client_port(), host(inet_server_addr()), inet_server_port(), "
    "pg_backend_pid()"
)
#: struct ucred (pid, uid, gid), what SO_PEERCRED answers on Linux.
_UCRED = struct.Struct("3i")


def transaction_pooled(alias: str) -> bool:
    """Whether the database alias reaches PostgreSQL through a transaction pooler (see the module docstring)."""
    db = connections[alias]
    return db.vendor == "postgresql" and bool(db.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS"))


def owns_its_session(db: BaseDatabaseWrapper) -> bool:
    """Whether the open PostgreSQL connection ``db`` is the server session that answers it, for certain.

    Over TCP the server sees this client's own socket (both ends' address and port); over a Unix socket
    the process at the other end (SO_PEERCRED, Linux) is the server's backend or the postmaster that
    forked it (/proc). False when anything sits
    in between, and whenever it cannot be told: session state is then never set (safe for a pool).
    """
    with db.cursor() as cursor:
        cursor.execute(SERVER_SIDE)
        client_host, client_port, server_host, server_port, backend_pid = cursor.fetchone()
    try:
        sock = socket.socket(fileno=db.connection.pgconn.socket)
    except OSError:  # pragma: no cover - a platform whose sockets Python cannot wrap: cannot tell
        return False
    try:
        if sock.family == socket.AF_UNIX:
            return client_host is None and _serves(_peer_pid(sock), backend_pid)
        if sock.family not in (socket.AF_INET, socket.AF_INET6) or client_host is None:
            return False
        local, peer = sock.getsockname(), sock.getpeername()
        return (
            (local[1], peer[1]) == (client_port, server_port)
            and _same_host(local[0], client_host)
            and _same_host(peer[0], server_host)
        )
    except OSError:  # pragma: no cover - the socket could not be asked: cannot tell
        return False
    finally:
        sock.detach()  # the socket is psycopg's: never closed here


def _peer_pid(sock: socket.socket) -> int | None:
    """The pid of the process at the other end of a Unix socket; None where the platform cannot say."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:  # pragma: no cover - not Linux
        return None
    pid: int = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, option, _UCRED.size))[0]
    return pid


def _serves(peer_pid: int | None, backend_pid: int) -> bool:
    """Whether the process at the other end of a Unix socket (the server that listened: PostgreSQL's
    postmaster) is the backend itself or its parent; False where /proc cannot tell (another pid namespace)."""
    if peer_pid is None or peer_pid <= 0:
        return False
    if peer_pid == backend_pid:
        return True
    try:
        stat = Path(f"/proc/{backend_pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[1] == str(peer_pid)  # the fields after "(comm)": state, ppid


def _same_host(ours: Any, theirs: Any) -> bool:
    """Whether two textual IP addresses are one (an IPv4-mapped IPv6 address is its IPv4 one; no zone)."""
    try:
        mine = ipaddress.ip_address(str(ours).split("%", 1)[0])
        other = ipaddress.ip_address(str(theirs).split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(mine, ipaddress.IPv6Address) and mine.ipv4_mapped is not None:
        mine = mine.ipv4_mapped
    if isinstance(other, ipaddress.IPv6Address) and other.ipv4_mapped is not None:
        other = other.ipv4_mapped
    return mine == other
