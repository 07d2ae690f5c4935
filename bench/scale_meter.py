"""What the scale benchmark reads besides the queue: CPU from /proc, and each store's own counters.

CPU: utime + stime of a process (all its threads) from ``/proc/<pid>/stat``, in seconds, and the
machine's busy share from ``/proc/stat``; Linux only, like the rest of the benchmark. Loopback bytes
from ``/proc/net/dev`` count every process's loopback traffic, not only the benchmark's.

Store counters, read at the two ends of the measured window: Redis ``INFO`` (commands processed,
network bytes in and out, the server's pid); PostgreSQL ``pg_stat_database`` (transactions committed
in the benchmark's database: each of the worker's autocommitted statements is one; PostgreSQL flushes them
late while a backend is busy, so bench.scale reads them over the whole drain) and the pids of
its server processes (the benchmark database's backends and the background processes); RabbitMQ's
``beam.smp`` processes and, over the whole drain, the bytes and socket operations of the workers'
connections (``rabbitmqctl list_connections``); moto's server process for SQS, and the API calls and
bytes between the workers and moto, counted by a relay in the benchmark's process (``CountingRelay``).
"""

from __future__ import annotations

import os
import re
import select
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> float | None:
    """Seconds of CPU (user + system, every thread) the process has used; None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": fields 3.. of proc(5)
    return (int(fields[11]) + int(fields[12])) / TICKS


def cpu_of(pids: list[int]) -> dict[int, float]:
    """CPU seconds per pid still alive."""
    found = {}
    for pid in pids:
        seconds = process_cpu(pid)
        if seconds is not None:
            found[pid] = seconds
    return found


def pids_named(name: str) -> list[int]:
    """Every process whose command name (``/proc/<pid>/comm``) is ``name``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == name:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def machine_ticks() -> tuple[int, int]:
    """(busy, total) clock ticks of every CPU since boot (/proc/stat; iowait counts as idle)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    total = sum(values[:8])
    return total - idle, total


def loopback_bytes() -> int:
    """Bytes sent on the loopback interface since boot (each loopback byte is sent once and received once)."""
    for line in Path("/proc/net/dev").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name.strip() == "lo":
            return int(rest.split()[8])
    return 0


@dataclass
class Snapshot:
    """Everything read at one end of the measured window."""

    at: float
    remaining: int
    workers: dict[int, float]
    servers: dict[int, float]
    busy: tuple[int, int]
    loopback: int
    counters: dict[str, float] = field(default_factory=dict)


def delta(first: Snapshot, last: Snapshot) -> dict[str, Any]:
    """Jobs, seconds, CPU and counters between two snapshots (CPU of processes alive at both)."""
    jobs = first.remaining - last.remaining
    seconds = last.at - first.at
    worker_cpu = sum(last.workers[pid] - first.workers[pid] for pid in first.workers if pid in last.workers)
    server_cpu = sum(last.servers[pid] - first.servers[pid] for pid in first.servers if pid in last.servers)
    busy = (last.busy[0] - first.busy[0]) / max(1, last.busy[1] - first.busy[1])
    result: dict[str, Any] = {
        "jobs": jobs,
        "seconds": seconds,
        "rate": jobs / seconds if seconds > 0 else 0.0,
        "worker_cpu_ms_per_job": 1000 * worker_cpu / max(1, jobs),
        "server_cpu_ms_per_job": 1000 * server_cpu / max(1, jobs),
        "worker_cores": worker_cpu / seconds if seconds > 0 else 0.0,
        "server_cores": server_cpu / seconds if seconds > 0 else 0.0,
        "machine_busy": busy,
        "loopback_bytes_per_job": (last.loopback - first.loopback) / max(1, jobs),
    }
    for name, value in last.counters.items():
        if name in first.counters:
            result[f"{name}_per_job"] = (value - first.counters[name]) / max(1, jobs)
    return result


# -- the stores' own counters -------------------------------------------------------------------------


def redis_info(url: str) -> tuple[list[int], dict[str, float]]:
    """The Redis server's pid and its counters: commands processed, bytes in and out."""
    import redis

    client = redis.Redis.from_url(url)
    try:
        info = client.info()
    finally:
        client.close()
    counters = {
        "redis_commands": float(info["total_commands_processed"]),
        "redis_bytes_in": float(info["total_net_input_bytes"]),
        "redis_bytes_out": float(info["total_net_output_bytes"]),
    }
    return [int(info["process_id"])], counters


def postgres_info(alias: str) -> tuple[list[int], dict[str, float]]:
    """The benchmark database's server processes (its backends and the background ones) and its commits."""
    from django.db import connections

    with connections[alias].cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE (datname = current_database() OR datname IS NULL) "
            "AND pid <> pg_backend_pid()"
        )
        pids = [int(row[0]) for row in cursor.fetchall()]
        cursor.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        commits = float(cursor.fetchone()[0])
    return pids, {"pg_commits": commits}


#: A worker's AMQP connection names its process: ``kinetis_queue <connection> (pid N)`` (backends/rabbitmq/session.py).
_AMQP_PID = re.compile(r'"connection_name","kinetis_queue [^"]*\(pid (\d+)\)"')


def rabbitmq_connections(pids: list[int]) -> dict[str, float]:
    """Bytes and socket operations the broker counted on the connections of these processes, summed.

    ``rabbitmqctl`` starts an Erlang VM (a second or more of CPU), so bench.scale reads this outside the
    measured window: before the resume and after the drain, while the workers are still connected.
    """
    out = subprocess.run(
        ["rabbitmqctl", "-q", "--no-table-headers", "list_connections", "client_properties",
         "recv_oct", "send_oct", "recv_cnt", "send_cnt"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    wanted = set(pids)
    totals = dict.fromkeys(("amqp_bytes_in", "amqp_bytes_out", "amqp_reads", "amqp_writes", "amqp_ops"), 0.0)
    for line in out.splitlines():
        found = _AMQP_PID.search(line)
        if found is None or int(found.group(1)) not in wanted:
            continue
        recv_oct, send_oct, recv_cnt, send_cnt = (float(v) for v in line.rsplit("\t", 4)[1:])
        totals["amqp_bytes_in"] += recv_oct
        totals["amqp_bytes_out"] += send_oct
        totals["amqp_reads"] += recv_cnt
        totals["amqp_writes"] += send_cnt
        totals["amqp_ops"] += recv_cnt + send_cnt
    return totals


#: The SQS actions the relay counts by name (the ``X-Amz-Target`` header of the JSON protocol).
SQS_ACTIONS = (
    "ReceiveMessage", "DeleteMessage", "DeleteMessageBatch", "ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch", "SendMessage", "SendMessageBatch", "GetQueueAttributes", "GetQueueUrl",
)  # fmt: skip
_TARGET = re.compile(rb"X-Amz-Target: AmazonSQS\.(\w+)", re.IGNORECASE)


class CountingRelay:
    """A TCP relay on a free loopback port in front of moto: the workers' SQS endpoint, counting what passes.

    Counts the bytes each way and the API calls by action (one request starts with its HTTP headers, which
    name the action). The relay's own CPU is the benchmark process's, not the workers' or moto's.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.lock = threading.Lock()
        self.counts: dict[str, float] = {"sqs_bytes_in": 0.0, "sqs_bytes_out": 0.0, "sqs_calls": 0.0}
        self.counts.update({f"sqs_{action}": 0.0 for action in SQS_ACTIONS})
        threading.Thread(target=self._accept, name="sqs-relay", daemon=True).start()

    def counters(self) -> dict[str, float]:
        with self.lock:
            return dict(self.counts)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

    def _pipe(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        except OSError:
            client.close()
            return
        ends = {client: upstream, upstream: client}
        try:
            while True:
                readable, _, _ = select.select(list(ends), [], [])
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    ends[sock].sendall(data)
                    self._count(data, from_client=sock is client)
        except OSError:
            return
        finally:
            client.close()
            upstream.close()

    def _count(self, data: bytes, *, from_client: bool) -> None:
        with self.lock:
            self.counts["sqs_bytes_in" if from_client else "sqs_bytes_out"] += len(data)  # as the store sees it
            if from_client:
                for action in _TARGET.findall(data):
                    self.counts["sqs_calls"] += 1
                    key = f"sqs_{action.decode()}"
                    self.counts[key] = self.counts.get(key, 0.0) + 1

    def close(self) -> None:
        self.listener.close()
