"""Local Redis topologies the tests start: a cluster (three masters, three replicas) and a Sentinel set
(a master, a replica, three sentinels), each on free loopback ports in a temporary directory.

Every server runs without persistence (``--save "" --appendonly no``); readiness is polled (``cluster_state:ok``
on every node, the sentinels knowing the master and its replica), never slept for. ``stop()`` kills what was
started, by process.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

#: redis-cli --cluster create's options: a replica per master, no question asked.
REPLICAS = ("--cluster-replicas", "1", "--cluster-yes")
#: Seconds after which Redis gives up a manual failover (CLUSTER_MF_TIMEOUT), plus a margin.
MANUAL_FAILOVER_TIMEOUT = 6.0
#: Seconds a topology may take to become ready before the fixture fails.
READY_WITHIN = 30.0


#: Where the ports of these servers are chosen: below the kernel's ephemeral range, from which every outgoing
#: connection (a cluster bus link, a client) takes its port. A port bind(0) handed out came from that range, and
#: an outgoing connection could take it before the server bound it: the server then exited at start-up and the
#: cluster never came up (make test, one xdist worker's six nodes and their twelve ports at a time).
PORTS = range(20000, 32000)
#: Servers started again on other ports when a port was taken between its choice and the server's bind.
LAUNCH_TRIES = 5


def free_port() -> int:
    """A loopback port in PORTS that nothing listens on now."""
    while True:
        port = random.choice(PORTS)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


def free_port_pair() -> tuple[int, int]:
    """Two free ports, not the same: a cluster node's, and its cluster bus's (``--cluster-port``)."""
    port = free_port()
    while (other := free_port()) == port:
        pass
    return port, other


def await_condition(condition: Callable[[], bool], within: float, what: str) -> None:
    """Poll ``condition`` every 50 ms until it holds; AssertionError naming ``what`` after ``within`` seconds."""
    deadline = time.monotonic() + within
    while True:
        try:
            if condition():
                return
        except redis.RedisError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {within} s")
        time.sleep(0.05)


def admin(port: int) -> redis.Redis:
    """A plain client on one server, for what the tests do around the backend (never the backend itself)."""
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)


class Servers:
    """Server processes started in one temporary directory; stop() kills them and removes the directory."""

    def __init__(self, kind: str) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix=f"kq-{kind}-"))
        self.processes: dict[int, subprocess.Popen[bytes]] = {}

    def start(self, port: int, *args: str) -> None:
        with open(self.directory / f"{port}.log", "wb") as log:  # the server keeps its own descriptor
            self.processes[port] = subprocess.Popen(
                ["redis-server", *args], cwd=self.directory, stdout=log, stderr=subprocess.STDOUT
            )

    def launch(self, args: Callable[[int, int], tuple[str, ...]]) -> tuple[int, int]:
        """Start a server on a free port (and a second one it needs, such as its cluster bus) and wait until it
        answers; one that exits instead lost a port to another process after its choice, and starts again on
        new ports (at most LAUNCH_TRIES times)."""
        for _ in range(LAUNCH_TRIES):
            port, other = free_port_pair()
            self.start(port, *args(port, other))
            process = self.processes[port]

            def answered_or_exited(port: int = port, process: subprocess.Popen[bytes] = process) -> bool:
                if process.poll() is not None:
                    return True
                # One short try a poll: whatever else holds the port may never answer, and admin()'s client
                # retries with a backoff of its own.
                probe = redis.Redis(host="127.0.0.1", port=port, socket_timeout=0.5, retry=Retry(NoBackoff(), 0))
                try:
                    return bool(probe.ping())
                finally:
                    probe.close()

            await_condition(answered_or_exited, READY_WITHIN, f"redis on {port} answering")
            if process.poll() is None:
                return port, other
            del self.processes[port]
        raise AssertionError(f"redis-server exited at start-up {LAUNCH_TRIES} times (logs in {self.directory})")

    def stop(self) -> None:
        for process in self.processes.values():
            process.kill()
        for process in self.processes.values():
            process.wait(10)
        shutil.rmtree(self.directory, ignore_errors=True)


def _plain(port: int) -> tuple[str, ...]:
    return ("--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")


class LocalCluster(Servers):
    """Three masters and three replicas (``redis-cli --cluster create --cluster-replicas 1``)."""

    def __init__(self) -> None:
        super().__init__("cluster")
        self.ports: list[int] = []
        try:
            self._create()
        except BaseException:
            self.stop()
            raise

    def _create(self) -> None:
        for _ in range(6):
            port, _bus = self.launch(
                lambda port, bus: (
                    *_plain(port),
                    *("--cluster-enabled", "yes", "--cluster-port", str(bus)),
                    *("--cluster-config-file", f"nodes-{port}.conf", "--cluster-node-timeout", "2000"),
                )
            )
            self.ports.append(port)
        subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports), *REPLICAS],
            check=True,
            capture_output=True,
            timeout=READY_WITHIN,
        )
        self.await_ok()

    @property
    def urls(self) -> list[str]:
        """Start nodes for the backend's CLUSTER_NODES (two of them, so one may be down)."""
        return [f"redis://127.0.0.1:{port}" for port in self.ports[:2]]

    def await_ok(self) -> None:
        """Every node says cluster_state:ok and agrees on three masters each with a replica."""

        def ok() -> bool:
            for port in self.ports:
                info = admin(port).execute_command("CLUSTER", "INFO")
                text = info.decode() if isinstance(info, bytes) else str(info)
                if "cluster_state:ok" not in text:
                    return False
            return len(self.replicas()) == 3

        try:
            await_condition(ok, READY_WITHIN, "the cluster reaching cluster_state:ok")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the nodes: {self._states()}") from None

    def _states(self) -> str:
        """Each node's cluster state, role and replication link, for a cluster that did not come up."""
        states = []
        for port in self.ports:
            try:
                info = admin(port).execute_command("CLUSTER", "INFO")
                text = info.decode() if isinstance(info, bytes) else str(info)
                state = next((line for line in text.splitlines() if line.startswith("cluster_state:")), "?")
                replication = admin(port).info("replication")
                link = replication.get("master_link_status", "-")
                states.append(f"{port} {state.strip()} role={replication.get('role')} link={link}")
            except redis.RedisError as error:
                states.append(f"{port} unreachable ({type(error).__name__})")
        return "; ".join(states)

    def roles(self) -> dict[int, bytes]:
        return {port: admin(port).execute_command("ROLE")[0] for port in self.ports}

    def masters(self) -> list[int]:
        return [port for port, role in self.roles().items() if role == b"master"]

    def replicas(self) -> list[int]:
        """Ports of the replicas whose link to their master is up."""
        up = []
        for port in self.ports:
            info = admin(port).info("replication")
            if info.get("role") == "slave" and info.get("master_link_status") == "up":
                up.append(port)
        return up

    def replica_serving(self, key: str) -> int:
        """The port of a replica of the master that serves ``key``'s slot."""
        from redis.crc import key_slot

        slot = key_slot(key.encode())
        found: list[int] = []

        def replica_found() -> bool:
            for start, end, master, *_ in admin(self.ports[0]).execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    for port in self.ports:
                        info = admin(port).info("replication")
                        if info.get("master_port") == int(master[1]) and info.get("master_link_status") == "up":
                            found.append(port)
                            return True
            return False

        await_condition(replica_found, READY_WITHIN, f"a replica of slot {slot}'s master with its link up")
        return found[0]

    def failover(self, replica: int) -> None:
        """``CLUSTER FAILOVER`` on ``replica`` (a coordinated manual failover); returns once it is a master
        and the cluster is ok again with its old master as its replica."""
        sent = [0.0]

        def promoted() -> bool:
            # A manual failover the master cannot complete (its replica lagging) times out after 5 s: send it again.
            if time.monotonic() - sent[0] > MANUAL_FAILOVER_TIMEOUT:
                sent[0] = time.monotonic()
                admin(replica).execute_command("CLUSTER", "FAILOVER")
            return self.roles()[replica] == b"master"

        await_condition(promoted, READY_WITHIN, f"{replica} becoming master")
        self.await_ok()

    def flush(self) -> None:
        for port in self.masters():
            admin(port).flushall()


class LocalSentinels(Servers):
    """A master, one replica and three sentinels watching it as SERVICE (quorum 2)."""

    SERVICE = "kqmaster"

    def __init__(self) -> None:
        super().__init__("sentinel")
        self.data = [free_port(), free_port()]
        self.sentinels = [free_port() for _ in range(3)]
        try:
            self._create()
        except BaseException:
            self.stop()
            raise

    def _create(self) -> None:
        master, replica = self.data
        self.start(master, *_plain(master))
        self.start(replica, *_plain(replica), "--replicaof", "127.0.0.1", str(master))
        for port in self.sentinels:
            conf = self.directory / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\n"
                f"sentinel monitor {self.SERVICE} 127.0.0.1 {master} 2\n"
                f"sentinel down-after-milliseconds {self.SERVICE} 1000\n"
                f"sentinel failover-timeout {self.SERVICE} 5000\n"
            )
            self.start(port, str(conf), "--sentinel")
        self.await_ready()

    @property
    def urls(self) -> list[str]:
        return [f"redis://127.0.0.1:{port}" for port in self.sentinels]

    def master(self) -> int:
        _, port = admin(self.sentinels[0]).sentinel_get_master_addr_by_name(self.SERVICE)
        return int(port)

    def await_ready(self) -> None:
        """Every sentinel knows the master, its replica (link up) and the two other sentinels."""

        def ready() -> bool:
            master = self.master()
            (replica,) = (port for port in self.data if port != master)
            info = admin(replica).info("replication")
            if info.get("master_port") != master or info.get("master_link_status") != "up":
                return False
            for port in self.sentinels:
                state = admin(port).sentinel_master(self.SERVICE)
                if int(state["num-other-sentinels"]) != 2 or int(state["num-slaves"]) != 1:
                    return False
                if int(state["port"]) != master:
                    return False
            return True

        await_condition(ready, READY_WITHIN, "the sentinels agreeing on the master and its replica")

    def failover(self) -> int:
        """``SENTINEL FAILOVER``; returns the new master's port once every sentinel names it and its replica is up."""
        old = self.master()

        def accepted() -> bool:
            # NOGOODSLAVE until the sentinel has fresh INFO from the replica: asked again until it accepts.
            return bool(admin(self.sentinels[0]).execute_command("SENTINEL", "FAILOVER", self.SERVICE))

        await_condition(accepted, READY_WITHIN, "the sentinel accepting SENTINEL FAILOVER")
        await_condition(lambda: self.master() != old, READY_WITHIN, "the sentinels promoting the replica")
        new = self.master()
        await_condition(
            lambda: admin(new).info("replication").get("role") == "master", READY_WITHIN, "the new master's role"
        )
        self.await_ready()

        def demoted() -> bool:
            info = admin(old).info("replication")
            return info.get("master_port") == new and info.get("master_link_status") == "up"

        await_condition(demoted, READY_WITHIN, "the old master replicating from the new one")
        return new
