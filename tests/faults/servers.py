"""Servers of a test's own, on free ports: started, SIGKILLed and stopped by the fault scenarios."""

from __future__ import annotations

import signal
import socket
import subprocess
from pathlib import Path

from tests.faults import history
from tests.support.helpers import wait_until


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateServer:
    """A server process a test started: ``kill()`` is the fault (SIGKILL, recorded), ``stop()`` the cleanup."""

    process: subprocess.Popen[bytes] | None = None

    def kill(self) -> None:
        assert self.process is not None
        history.record("fault.service.sigkill", None, target=self.process.pid)
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


class PrivateRedis(PrivateServer):
    """A redis-server of this test's own on a free port, its data dir in tmp; stopped by PID."""

    def __init__(self, directory: Path) -> None:
        self.directory, self.port = directory, free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.directory),
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
                "--daemonize",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(self._answers, timeout=30)

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False
