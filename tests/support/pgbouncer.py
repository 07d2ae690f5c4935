"""PgBouncer for the test suite: Debian's ``pgbouncer`` in transaction pooling, in front of the local PostgreSQL.

The sql-pgbouncer row (tests/support/backends.py) reaches the PostgreSQL test database through it. It runs
as a subprocess on a free loopback port, once per test session (per xdist worker): ``[databases]`` maps
every name to 127.0.0.1:5432, so the per-run test database needs no entry of its own; authentication is
``trust`` (the local server's own), with the one user the tests connect as in the auth file PgBouncer
still requires. PgBouncer refuses to run as root: as root it drops to ``nobody``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: The variable worker subprocesses read the port from (tests/settings.py PGBOUNCER_PORT).
PORT_VARIABLE = "KINETIS_TESTS_PGBOUNCER_PORT"
#: How long PgBouncer may take to listen.
START_TIMEOUT = 15.0
#: Server connections per (database, user): what the suite's busiest test (a kill storm at concurrency 8,
#: two workers plus the test itself) needs at once, with room; clients beyond it wait for a transaction to end.
POOL_SIZE = 40

CONFIG = """\
[databases]
* = host={pg_host} port={pg_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {auth_file}
pool_mode = transaction
max_client_conn = 1000
default_pool_size = {pool_size}
query_wait_timeout = 60
ignore_startup_parameters = extra_float_digits
{user_line}
"""


def binary() -> str:
    """The pgbouncer executable (Debian installs it in /usr/sbin, often not on a user's PATH)."""
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")
    if found is None:
        raise RuntimeError("pgbouncer is not installed: run scripts/system-deps.sh (apt-get install pgbouncer)")
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


class PgBouncer:
    """A running pgbouncer subprocess and the port it listens on."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.process = process
        self.port = port
        self.log = log

    @classmethod
    @contextmanager
    def running(cls, directory: Path, user: str, pg_host: str, pg_port: int) -> Iterator[PgBouncer]:
        """Start PgBouncer for ``user`` in ``directory`` (its config, auth file and log), stop it at the end."""
        directory.mkdir(parents=True, exist_ok=True)
        auth_file = directory / "users.txt"
        auth_file.write_text(f'"{user}" ""\n')
        as_root = os.geteuid() == 0
        if as_root:  # the unprivileged user must read the files PgBouncer opens after dropping root
            directory.chmod(0o755)
            auth_file.chmod(0o644)
        port = _free_port()
        config = directory / "pgbouncer.ini"
        config.write_text(
            CONFIG.format(
                pg_host=pg_host,
                pg_port=pg_port,
                port=port,
                auth_file=auth_file,
                pool_size=POOL_SIZE,
                user_line="user = nobody" if as_root else "",
            )
        )
        if as_root:
            config.chmod(0o644)
        log = directory / "pgbouncer.log"
        with log.open("wb") as out:
            # Foreground, logging to stderr (the file opened here, so no log file for the dropped user to create).
            process = subprocess.Popen([binary(), str(config)], stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while not _listening(port):
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                process.wait()
                raise RuntimeError(f"pgbouncer did not start on port {port}:\n{log.read_text(errors='replace')}")
            time.sleep(0.05)  # polling a port being opened by another process: no event to wait for
        try:
            yield cls(process, port, log)
        finally:
            process.terminate()  # SIGTERM: immediate shutdown, closing every client and server connection
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
