"""Connection and service faults (RELIABILITY.md §3 C1, C2, B2, B5, B7, B9), with in-process workers.

The workers are ``Worker`` objects in threads of the test process (tests/faults/inproc.py), each on
connections of its own that reach their server through a ``FaultProxy`` (or a private server), with
client timeouts of 1-2 s, so that every call can be timed. A worker an exception stops is counted
and replaced by a fresh one, as a supervisor replaces a process.

Contract: "What push() guarantees" (a push that returned has a stored job behind it), "Failure
vocabulary" (a transport error from pop() or a settlement propagates and stops the worker), "The
pop() priority/timeout contract" (an operation in flight runs to completion or to its transport's
own timeout), "Reservation renewal" (failures counted and logged once, after the settlement) and
"Recording a job before fail()" (a record() error propagates and nothing is settled).

B8 (a RabbitMQ queue deleted under a pusher) is covered in tests/specific/test_rabbitmq.py
(test_a_push_to_a_queue_deleted_under_the_pusher_is_not_confirmed, and the same for a delay tier).
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import OperationalError
from django.test import override_settings

from kinetis_queue import conf, connections
from kinetis_queue.contracts import Queue
from kinetis_queue.worker import Worker
from tests.faults import history, procs, stores
from tests.faults.conftest import soak_scale, soak_seconds
from tests.faults.faultproxy import Blackhole, Latency, Pass, Refuse, Reset
from tests.faults.harness import failed_records, finish, push
from tests.faults.history import new_tag
from tests.faults.inproc import CallTimer, Pusher, RenewalLog, Route, ThreadWorkers, dispose, route
from tests.faults.jobs import Tagged, TaggedFails
from tests.faults.servers import PrivateRedis, PrivateServer, free_port
from tests.support.backends import BACKENDS, Backend
from tests.support.coverage_env import uncovered
from tests.support.helpers import wait_until

pytestmark = [pytest.mark.fault, pytest.mark.timeout(120)]


def _kind(backend: Backend) -> str:
    return str(settings.KINETIS_QUEUE["CONNECTIONS"][backend.connection]["BACKEND"])


def _engine(backend: Backend) -> str:
    return str(settings.DATABASES[backend.database or "default"]["ENGINE"]) if backend.database else ""


#: R, Q (PostgreSQL), S, M: every backend that talks to a server over TCP.
NETWORKED = [b for b in BACKENDS if _kind(b) in ("redis", "sqs", "rabbitmq") or _engine(b).endswith("postgresql")]
REDIS = [b for b in BACKENDS if _kind(b) == "redis"]
SQS = [b for b in BACKENDS if _kind(b) == "sqs"]
RABBITMQ = [b for b in BACKENDS if _kind(b) == "rabbitmq"]
SERVER_SQL = [b for b in BACKENDS if _engine(b).endswith(("postgresql", "mysql"))]
POSTGRES = [b for b in BACKENDS if _engine(b).endswith("postgresql")]


def _ids(backend: Backend) -> str:
    return backend.id


@pytest.fixture
def path(
    backend: Backend, connection: Queue, queue_name: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Route]:
    """The backend's fault route: a proxy in front of its server, and queues that go through it."""
    del connection  # requested first: it sets up the backend (moto's server, the test's SQS queue)
    made = route(backend, queue_name, seed, monkeypatch)
    try:
        yield made
    finally:
        made.close()


def _run_until_drained(store: Any, queue_name: str, pusher: Pusher | None, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while (pusher is not None and pusher.is_alive()) or store.remaining(queue_name):
        assert time.monotonic() < deadline, "the queue did not drain"
        time.sleep(0.2)


def _within_bounds(timer: CallTimer, path: Route, *, skip: tuple[str, ...] = ()) -> dict[str, tuple[float, float]]:
    """Each operation's longest call beyond its wait, and its bound, where the bound was exceeded."""
    return {
        op: (round(took, 2), round(path.bound(op), 2))
        for op, took in timer.longest.items()
        if op not in skip and took > path.bound(op)
    }


# -- C2: a blackhole longer than the client timeout ----------------------------------------------------


@pytest.mark.parametrize("connection", NETWORKED, indirect=True, ids=_ids)
@pytest.mark.logs_errors("kinetis_queue.worker")  # the renewals the blackhole ate are logged
def test_c2_blackhole_longer_than_the_client_timeout(
    backend: Backend,
    connection: Queue,
    store: Any,
    path: Route,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
) -> None:
    """5 s of blackhole on every worker (and pusher) connection: no call outlasts its timeout + 1 s, nothing
    acknowledged is lost, and a delivery's renewal failures are logged once."""
    rng = random.Random(seed)
    timer = CallTimer()
    # Two long jobs first, so that both workers are renewing when the blackhole starts.
    early = [Tagged(new_tag(run_id, i), ms=1500 if i < 2 else rng.randint(10, 50)) for i in range(10)]
    for job in early:
        push(connection, job, queue_name)
    later = [Tagged(new_tag(run_id, 10 + i), ms=rng.randint(10, 50)) for i in range(30)]
    pusher_queue = timer.wrap(path.make()) if path.pushes_proxied else connection
    pusher_queue.size(queue_name)  # connected, the queue looked up: a pusher already at work
    renewals = RenewalLog()
    try:
        with renewals.attached(), ThreadWorkers(path.make, [queue_name], 2, timer) as workers:
            pusher = Pusher(pusher_queue, queue_name, later, rate=20)
            pusher.start()
            time.sleep(0.7)  # the nemesis's pace: both long jobs are running
            path.proxy.set(Blackhole())
            time.sleep(5.0)
            path.proxy.set(Pass())
            _run_until_drained(store, queue_name, pusher)
            hung = workers.halt()
    finally:
        if pusher_queue is not connection:
            dispose(pusher_queue)
    drain_s = procs.drain(connection, [queue_name], store)
    logged = dict(renewals.per_delivery)
    report = finish(
        "C2-blackhole-5s",
        backend.id,
        seed,
        history_dir,
        queue_name,
        store=store,
        drain_s=drain_s,
        extra={
            **timer.figures(),
            "bounds_s": {op: path.bound(op) for op in timer.longest},
            "hung_workers": hung,
            "worker_stops_by_cause": dict(workers.stops),
            "renewal_failures_logged": sum(logged.values()),
            "pushes_through_proxy": path.pushes_proxied,
        },
    )
    assert hung == [], "a worker is still inside a call"
    assert _within_bounds(timer, path) == {}, timer.figures()
    assert report["lost"] == 0, report["lost_tags"]
    assert report["unexpected"] == 0 and report["store_remaining"] == 0
    assert report["attempted"] == 40 and report["acknowledged"] >= 10
    assert all(n == 1 for n in logged.values()), logged  # once per delivery, after its settlement
    if backend.fenced:
        assert report["stale_accepted"] == 0


@pytest.mark.parametrize("connection", SERVER_SQL, indirect=True, ids=_ids)
def test_a_blackholed_sql_worker_call_raises_within_operation_timeout(
    backend: Backend,
    connection: Queue,
    store: Any,
    path: Route,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
) -> None:
    """The SQL backend's OPERATION_TIMEOUT: a claimed job's ack into a blackhole raises OperationalError in
    time (PostgreSQL: the watchdog closes the socket; MariaDB: read_timeout), and the job comes back to the
    same queue, which reconnects."""
    push(connection, Tagged(new_tag(run_id, 0)), queue_name)
    queue = path.make()
    try:
        job = queue.pop(5, [queue_name])
        assert job is not None
        path.proxy.set(Blackhole())
        began = time.monotonic()
        with pytest.raises(OperationalError) as raised:
            queue.ack(job)
        took = time.monotonic() - began
        path.proxy.set(Pass())
        # The ack never reached the server: the reservation expires, and the same queue object, whose
        # broken connection is replaced on its next call, gets the job again.
        worker = Worker(queue, retry_base_delay=0)
        try:
            assert worker.process_next(5, [queue_name])
        finally:
            worker.close()
        assert store.remaining(queue_name) == 0
    finally:
        dispose(queue)
    assert took <= path.bound("ack"), took
    if _engine(backend).endswith("postgresql"):
        assert "OPERATION_TIMEOUT" in str(raised.value)
    drain_s = procs.drain(connection, [queue_name], store)
    report = finish(
        "C2-sql-operation-timeout",
        backend.id,
        seed,
        history_dir,
        queue_name,
        store=store,
        drain_s=drain_s,
        extra={"ack_raised_after_s": round(took, 2), "bound_s": path.bound("ack")},
    )
    assert report["lost"] == 0 and report["store_remaining"] == 0 and report["executions"] == 1


# -- C1-lite: random resets on the worker's connections ------------------------------------------------

#: C1 in CI: 60 jobs of 20-50 ms (about 5 s a backend); the soak's composite nemesis resets at length.
JOBS_C1 = 60


@pytest.mark.parametrize("connection", NETWORKED, indirect=True, ids=_ids)
def test_c1_random_resets_on_the_worker_connections(
    backend: Backend,
    connection: Queue,
    store: Any,
    path: Route,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
) -> None:
    """60 jobs, 2 workers, an RST on every worker connection every 0.5-1 s: lost 0, unexpected 0, and at
    most one duplicate per connection reset (a worker holds at most one delivery)."""
    _reset_storm(
        "C1-lite-resets",
        backend,
        connection,
        store,
        path,
        queue_name,
        history_dir,
        seed,
        run_id,
        jobs=JOBS_C1,
        every=(0.5, 1.0),
        timeout=60,
    )


@pytest.mark.soak
@pytest.mark.timeout(int(soak_seconds()) + 900)
@pytest.mark.parametrize("connection", NETWORKED, indirect=True, ids=_ids)
def test_c1_random_resets_soak(
    backend: Backend,
    connection: Queue,
    store: Any,
    path: Route,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
) -> None:
    """Soak: 500 jobs (scaled by KQ_SOAK_SECONDS), 2 workers, a reset every U(0.5, 2) s."""
    _reset_storm(
        "C1-resets-soak",
        backend,
        connection,
        store,
        path,
        queue_name,
        history_dir,
        seed,
        run_id,
        jobs=max(100, int(500 * soak_scale())),
        every=(0.5, 2.0),
        timeout=soak_seconds() + 600,
    )


def _reset_storm(
    scenario: str,
    backend: Backend,
    connection: Queue,
    store: Any,
    path: Route,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
    *,
    jobs: int,
    every: tuple[float, float],
    timeout: float,
) -> None:
    rng = random.Random(seed)
    timer = CallTimer()
    for i in range(jobs):
        push(connection, Tagged(new_tag(run_id, i), ms=rng.randint(20, 50)), queue_name)
    resets = connections_reset = 0
    with ThreadWorkers(path.make, [queue_name], 2, timer) as workers:
        deadline = time.monotonic() + timeout
        while store.remaining(queue_name):
            assert time.monotonic() < deadline, "the queue did not drain"
            time.sleep(rng.uniform(*every))  # the nemesis's pace
            connections_reset += path.proxy.open_connections
            path.proxy.set(Reset())
            time.sleep(0.05)
            path.proxy.set(Pass())
            resets += 1
        hung = workers.halt()
    drain_s = procs.drain(connection, [queue_name], store)
    report = finish(
        scenario,
        backend.id,
        seed,
        history_dir,
        queue_name,
        store=store,
        drain_s=drain_s,
        extra={
            **timer.figures(),
            "resets": resets,
            "connections_reset": connections_reset,
            "hung_workers": hung,
            "worker_stops_by_cause": dict(workers.stops),
        },
    )
    assert hung == []
    assert report["attempted"] == report["acknowledged"] == report["executed_unique"] == jobs
    assert report["lost"] == 0, report["lost_tags"]
    assert report["unexpected"] == 0 and report["store_remaining"] == 0
    assert report["duplicated"] <= connections_reset
    if backend.fenced:
        assert report["stale_accepted"] == 0


# -- C3 (soak): latency on every worker connection ----------------------------------------------------


@pytest.mark.soak
@pytest.mark.timeout(int(soak_seconds()) + 900)
@pytest.mark.parametrize("connection", NETWORKED, indirect=True, ids=_ids)
def test_c3_latency_soak(
    backend: Backend,
    connection: Queue,
    store: Any,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Soak: 100 +/- 50 ms each way on every worker connection, VT 2 s, 300 jobs (scaled): correctness
    unchanged, and renewals keep every live lease (no execution overlaps another of the same job)."""
    rng = random.Random(seed)
    slow = route(backend, queue_name, seed, monkeypatch, visibility_timeout=2)
    timer = CallTimer()
    jobs = max(50, int(300 * soak_scale()))
    try:
        for i in range(jobs):
            push(connection, Tagged(new_tag(run_id, i), ms=rng.randint(10, 50)), queue_name)
        slow.proxy.set(Latency(100, 50))
        started = time.monotonic()
        with ThreadWorkers(slow.make, [queue_name], 2, timer) as workers:
            _run_until_drained(store, queue_name, None, timeout=soak_seconds() + 600)
            hung = workers.halt(timeout=60)
        elapsed = time.monotonic() - started
        slow.proxy.set(Pass())
    finally:
        slow.close()
    drain_s = procs.drain(connection, [queue_name], store)
    report = finish(
        "C3-latency-soak",
        backend.id,
        seed,
        history_dir,
        queue_name,
        store=store,
        drain_s=drain_s,
        extra={
            **timer.figures(),
            "jobs_per_s": round(jobs / elapsed, 2),
            "hung_workers": hung,
            "worker_stops_by_cause": dict(workers.stops),
        },
    )
    assert hung == [] and report["lost"] == 0 and report["unexpected"] == 0 and report["store_remaining"] == 0
    assert report["overlapping_live_leases"] == 0
    assert report["executed_unique"] == jobs


# -- B2: Redis stalls (CLIENT PAUSE), then drops every client (CLIENT KILL) ----------------------------


@pytest.mark.parametrize("backend", REDIS, ids=_ids)
def test_b2_redis_client_pause_then_client_kill(
    backend: Backend, private_redis: PrivateRedis, queue_name: str, history_dir: Path, seed: int, run_id: str
) -> None:
    """CLIENT PAUSE 3000 ALL, then CLIENT KILL TYPE normal, under a pusher and 2 workers (SOCKET_TIMEOUT 1 s):
    every call returns or raises within 1 s + 1 s, and nothing acknowledged is lost."""
    import redis

    rng = random.Random(seed)
    url = f"redis://127.0.0.1:{private_redis.port}/0"
    base = conf.connection_settings(backend.connection)
    private = dataclasses.replace(base, options={**base.options, "URL": url, "SOCKET_TIMEOUT": 1})

    def make() -> Queue:
        return connections.backend_class(base).from_settings(private)

    direct = make()
    store = stores.RedisStore(backend, direct, url=url)
    timer = CallTimer()
    jobs = [Tagged(new_tag(run_id, i), ms=rng.randint(10, 50)) for i in range(100)]
    pusher_queue = timer.wrap(make())
    pauser, killer = redis.Redis.from_url(url), redis.Redis.from_url(url)
    try:
        with ThreadWorkers(make, [queue_name], 2, timer) as workers:
            pusher = Pusher(pusher_queue, queue_name, jobs, rate=50)
            pusher.start()
            time.sleep(rng.uniform(0.5, 1.0))  # the nemesis's pace
            history.record("fault.service.client_pause", None, ms=3000)
            pauser.execute_command("CLIENT", "PAUSE", 3000, "ALL")
            killed = int(killer.execute_command("CLIENT", "KILL", "TYPE", "normal"))  # runs once the pause ends
            history.record("fault.service.client_kill", None, killed=killed)
            _run_until_drained(store, queue_name, pusher)
            hung = workers.halt()
        drain_s = procs.drain(direct, [queue_name], store)
        report = finish(
            "B2-redis-pause-kill",
            backend.id,
            seed,
            history_dir,
            queue_name,
            store=store,
            drain_s=drain_s,
            extra={
                **timer.figures(),
                "clients_killed": killed,
                "hung_workers": hung,
                "worker_stops_by_cause": dict(workers.stops),
            },
        )
    finally:
        for client in (pauser, killer):
            client.close()
        dispose(pusher_queue)
        dispose(direct)
    assert hung == []
    assert all(took <= 1.0 + 1.0 for took in timer.longest.values()), timer.figures()
    assert report["attempted"] == 100
    assert report["lost"] == 0, report["lost_tags"]
    assert report["unexpected"] == 0 and report["store_remaining"] == 0 and report["stale_accepted"] == 0
    # A killed connection, or a call that timed out during the pause, costs at most one duplicate each.
    assert report["duplicated"] <= killed + workers.stopped


# -- B5: RabbitMQ closes this test's connections -------------------------------------------------------


def _close_rabbitmq_connections(name: str) -> int:
    """``rabbitmqctl close_connection`` for each connection whose client named itself ``name`` from this pid."""
    ctl = "/usr/sbin/rabbitmqctl"
    if not os.access(ctl, os.X_OK):
        pytest.skip("rabbitmqctl is not available")
    listed = subprocess.run(
        [ctl, "-q", "list_connections", "pid", "client_properties"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    ours = f'"kinetis_queue {name} (pid {os.getpid()})"'
    pids = [line.split("\t", 1)[0] for line in listed.splitlines() if ours in line]
    closing = [
        subprocess.Popen(
            [ctl, "-q", "close_connection", pid, "kinetis_queue fault test B5"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for pid in pids
    ]
    for process in closing:
        process.wait(timeout=60)
    return len(pids)


@pytest.mark.parametrize("connection", RABBITMQ, indirect=True, ids=_ids)
def test_b5_rabbitmq_closes_the_connections_of_this_test(
    backend: Backend, connection: Queue, store: Any, queue_name: str, history_dir: Path, seed: int, run_id: str
) -> None:
    """The broker closes every connection of this test's pusher and 2 workers mid-run (never anyone else's):
    every push that returned runs, held deliveries are requeued, stopped workers are replaced."""
    from kinetis_queue.backends.rabbitmq import RabbitMqQueue

    rng = random.Random(seed)
    name = f"b5{run_id}"  # the connection name the broker lists: how this test finds its own connections
    url = conf.connection_settings(backend.connection).options["URL"]

    def make() -> Queue:
        return RabbitMqQueue(url=url, heartbeat=2, connection=name)

    connection.size(queue_name)  # declared by the fixture's queue, which deletes it afterwards
    timer = CallTimer()
    jobs = [Tagged(new_tag(run_id, i), ms=rng.randint(20, 60)) for i in range(100)]
    pusher_queue = timer.wrap(make())
    try:
        with ThreadWorkers(make, [queue_name], 2, timer) as workers:
            pusher = Pusher(pusher_queue, queue_name, jobs, rate=50)
            pusher.start()
            time.sleep(rng.uniform(0.5, 1.0))  # the nemesis's pace
            history.record("fault.service.close_connections", None, name=name)
            closed = _close_rabbitmq_connections(name)
            pusher.join(timeout=60)
            _run_until_drained(store, queue_name, pusher)
            hung = workers.halt()
    finally:
        dispose(pusher_queue)
    drain_s = procs.drain(connection, [queue_name], store)
    report = finish(
        "B5-rabbitmq-close-connections",
        backend.id,
        seed,
        history_dir,
        queue_name,
        store=store,
        drain_s=drain_s,
        extra={
            **timer.figures(),
            "connections_closed": closed,
            "hung_workers": hung,
            "worker_stops_by_cause": dict(workers.stops),
        },
    )
    assert closed >= 1 and hung == []
    assert report["attempted"] == 100
    assert report["lost"] == 0, report["lost_tags"]
    assert report["unexpected"] == 0 and report["store_remaining"] == 0
    assert report["duplicated"] <= closed  # each closed connection held at most one delivery


# -- B7: the SQS endpoint goes away ---------------------------------------------------------------------


class PrivateMoto(PrivateServer):
    """moto's server on a port of this test's own; killed with SIGKILL and started again on the same port."""

    def __init__(self, port: int, log: Path) -> None:
        from tests.support.sqs_server import admin_client

        self.port, self.log = port, log
        self.endpoint = f"http://127.0.0.1:{port}"
        self.admin = admin_client(self.endpoint)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                env=uncovered(),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        wait_until(self._answers, timeout=30, interval=0.05)

    def _answers(self) -> bool:
        try:
            self.admin.list_queues()
            return True
        except Exception:
            return False


def _cpu_seconds(pid: int) -> float:
    """CPU time of ``pid``, its reaped children, and its live children (from /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    pids = [pid]
    try:
        pids += [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        pass
    for one in pids:
        try:
            fields = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(fields[i]) for i in (11, 12, 13, 14))  # utime, stime, cutime, cstime
    return total / ticks


@pytest.mark.parametrize("backend", SQS, ids=_ids)
def test_b7_sqs_endpoint_down_stops_the_worker_without_a_hot_spin(
    backend: Backend,
    tmp_path: Path,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A private moto is SIGKILLed under ``queue_work --processes 1`` and started again: push raises, the
    worker's transport error stops it, and the supervisor restarts it with a growing pause (no hot spin)."""
    from kinetis_queue.backends.sqs.queue import CONNECT_TIMEOUT, SqsQueue
    from tests.support.sqs_server import CLEARED_VARIABLES, ENDPOINT_VARIABLE, REGION, environment

    for variable in CLEARED_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    for variable, value in environment(tmp_path).items():
        monkeypatch.setenv(variable, value)
    moto = PrivateMoto(free_port(), tmp_path / "moto.log")
    moto.start()
    queue = SqsQueue(region=REGION, endpoint_url=moto.endpoint, visibility_timeout=1)
    output = tmp_path / "supervisor.log"
    supervisor: subprocess.Popen[bytes] | None = None
    try:
        moto.admin.create_queue(QueueName=queue_name)
        worker_env = {**procs.env(history_dir), ENDPOINT_VARIABLE: moto.endpoint}
        worker = [
            sys.executable,
            "-m",
            "django",
            "queue_work",
            f"--connection={backend.connection}",
            f"--queue={queue_name}",
            "--sleep=0.5",
            "--backoff=0",
            "-v",
            "0",
        ]
        with output.open("wb") as out:  # queue_work --processes N's parent, with one child
            supervisor = subprocess.Popen(
                [sys.executable, "-c", SUPERVISE, *worker],
                env=worker_env,
                cwd=procs.ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        for i in range(3):
            push(queue, Tagged(new_tag(run_id, i)), queue_name)
        wait_until(lambda: _done(history_dir) >= 3, timeout=60)  # the worker runs

        moto.kill()
        outage = time.monotonic()
        cpu_before = _cpu_seconds(supervisor.pid)
        began = time.monotonic()
        assert push(queue, Tagged(new_tag(run_id, 3)), queue_name) is None  # push.fail: ConnectionFailedError
        time_to_error = time.monotonic() - began
        time.sleep(4.0)  # the outage: the worker stops and the supervisor restarts it, pausing longer each time
        cpu = _cpu_seconds(supervisor.pid) - cpu_before
        window = time.monotonic() - outage
        restarts = len(re.findall(r"died with status [1-9]", output.read_text()))

        moto.start()  # its state is gone (not a durability test): the queue is created again
        moto.admin.create_queue(QueueName=queue_name)
        assert queue.push(Tagged("after-restart"), queue=queue_name)  # not recorded: nobody waits for it to run
    finally:
        if supervisor is not None and supervisor.poll() is None:
            supervisor.send_signal(signal.SIGTERM)
            supervisor.wait(timeout=30)
        dispose(queue)
        moto.stop()
    report = finish(
        "B7-sqs-endpoint-down",
        backend.id,
        seed,
        history_dir,
        queue_name,
        extra={
            "push_error_after_s": round(time_to_error, 2),
            "outage_window_s": round(window, 2),
            "restarts": restarts,
            "cpu_percent_during_outage": round(100 * cpu / window, 1),
        },
    )
    assert time_to_error <= CONNECT_TIMEOUT + 1
    assert report["executed_unique"] == 3 and report["lost"] == 0 and report["failed"] == 1
    # The worker stopped on its transport error, and the supervisor's doubling pause (1 s, 2 s, ...) bounds
    # how often it starts again: a hot loop would restart dozens of times in the window.
    assert 1 <= restarts <= 3, output.read_text()[-2000:]


#: The parent of ``queue_work --processes N`` (kinetis_queue.worker.supervisor), run with one child: the command line.
SUPERVISE = (
    "import sys; from kinetis_queue.worker.supervisor import Supervisor; "
    "sys.exit(Supervisor(sys.argv[1:], 1, say=lambda line: print(line, flush=True)).run())"
)


def _done(history_dir: Path) -> int:
    return len({e["tag"] for e in history.read(history_dir) if e["e"] == "exec.done"})


# -- B9: the failed-job store is down when the worker records a job ------------------------------------


class FailedJobsTo:
    """A database router sending the FailedJob model (and it alone) to ``alias``."""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return self.alias if model._meta.db_table == "kinetis_queue_failed_jobs" else None

    db_for_write = db_for_read


@pytest.mark.parametrize("connection", REDIS, indirect=True, ids=_ids)
@pytest.mark.skipif(not POSTGRES, reason="needs the PostgreSQL test database")
@pytest.mark.logs_errors("kinetis_queue.worker")  # the job fails for good
def test_b9_failed_job_store_down_during_record(
    backend: Backend,
    connection: Queue,
    store: Any,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Jobs on Redis, FailedJob on PostgreSQL behind a proxy that refuses, then resets, at the final failure:
    record() raises, nothing is settled, the worker stops; once the store is back each job is recorded once."""
    rng = random.Random(seed)
    pg = route(POSTGRES[0], queue_name, seed, monkeypatch)  # only its alias (and proxy) is used here
    alias = pg.alias
    assert alias is not None
    timer = CallTimer()
    try:
        with override_settings(DATABASE_ROUTERS=[FailedJobsTo(alias)]):
            for i in range(10):
                push(connection, TaggedFails(new_tag(run_id, i)), queue_name, max_attempts=1)
            pg.proxy.set(Refuse())
            with ThreadWorkers(lambda: connections.build(backend.connection), [queue_name], 1, timer) as workers:
                wait_until(lambda: _record_stops(workers) >= 10, timeout=30)
                pg.proxy.set(Reset())
                wait_until(lambda: _record_stops(workers) >= 10 + rng.randint(2, 5), timeout=30)
                pg.proxy.set(Pass())
                wait_until(lambda: store.remaining(queue_name) == 0, timeout=30)
                hung = workers.halt()
            drain_s = procs.drain(connection, [queue_name], store)
            records = failed_records(queue_name)
            report = finish(
                "B9-failed-store-down",
                backend.id,
                seed,
                history_dir,
                queue_name,
                store=store,
                drain_s=drain_s,
                extra={
                    "record_failures": _record_stops(workers),
                    "hung_workers": hung,
                    "worker_stops_by_cause": dict(workers.stops),
                },
            )
    finally:
        pg.close()
    failed = {e["tag"] for e in history.read(history_dir) if e["e"] == "settle.fail.ok"}
    assert hung == []
    assert sorted(records.values()) == [1] * 10  # every job recorded, once
    assert failed - set(records) == set()  # failed without a record: none
    assert report["lost"] == 0 and report["unexpected"] == 0 and report["store_remaining"] == 0
    assert report["worker_stops"] == _record_stops(workers) >= 12
    assert report["executions"] == 10 + _record_stops(workers)  # each stop: one more delivery, after VT


def _record_stops(workers: ThreadWorkers) -> int:
    return sum(n for cause, n in workers.stops.items() if cause.startswith("record:"))
