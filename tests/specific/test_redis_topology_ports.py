"""The Redis topologies the tests start own their ports (tests/support/redis_servers.py): a port taken by another
process between its choice and the server's bind costs a start on other ports, not the session's cluster."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import redis_servers


def test_ports_are_chosen_below_the_kernels_ephemeral_range() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [redis_servers.free_port() for _ in range(50)]
    assert all(port < low for port in ports)
    assert all(port != other for port, other in (redis_servers.free_port_pair() for _ in range(50)))


@pytest.fixture
def taken() -> Iterator[int]:
    """A port another process holds (here: a listening socket of this one)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", redis_servers.free_port()))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_a_server_that_lost_its_port_starts_again_on_other_ports(taken: int, monkeypatch: pytest.MonkeyPatch) -> None:
    choices = [(taken, redis_servers.free_port())]
    chosen = redis_servers.free_port_pair
    monkeypatch.setattr(redis_servers, "free_port_pair", lambda: choices.pop() if choices else chosen())
    servers = redis_servers.Servers("launch")
    try:
        port, _ = servers.launch(lambda port, other: redis_servers._plain(port))
        assert port != taken
        assert redis_servers.admin(port).ping()
        assert list(servers.processes) == [port]  # the server that exited is not kept to be stopped
    finally:
        servers.stop()
