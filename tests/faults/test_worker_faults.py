"""A3-A9, the worker's own faults: frozen, stopped, outlived, delayed, poisoned, observed (RELIABILITY.md §3 A).

Each scenario runs per backend of the fault tier's plan (R Redis, Q PostgreSQL, S SQS on moto, M
RabbitMQ) with real ``queue_work`` subprocesses where a process fault is the point (A3, A4, A5, A7)
and an in-process worker where none is (A6, A9). Every run ends with a drain and the checker's report
under ``reports/reliability/``. Visibility timeouts are the test settings' 1 s; RabbitMQ's workers
run with a 1 s AMQP heartbeat where the scenario needs the broker to notice a dead client.

A5 on RabbitMQ (a job three heartbeats long keeps its connection and its delivery) is
``tests/specific/test_rabbitmq_processes.py::test_a_job_three_heartbeats_long_keeps_its_connection_and_its_delivery``.
"""

from __future__ import annotations

import logging
import signal
import statistics
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kinetis_queue import signals
from kinetis_queue.contracts import Queue, RenewableQueue
from kinetis_queue.worker import ExitReason, Worker
from tests.faults import history, procs, stores
from tests.faults.harness import finish, push
from tests.faults.history import new_tag
from tests.faults.jobs import ExitsEveryAttempt, FailsFirstAttempt, Held, Spins, Tagged, TaggedFails
from tests.support.backends import BACKENDS, Backend
from tests.support.helpers import wait_until

#: The fault tier's backends (RELIABILITY.md §3 notation: Q is PostgreSQL).
FAULT_BACKENDS = [b for b in BACKENDS if b.id in ("sql-postgres", "redis", "sqs", "rabbitmq")]
#: Backends whose recovery is a lease timeout, renewed by the worker's heartbeat: R, Q, S.
RENEWING = [b for b in FAULT_BACKENDS if b.recovers_by_timeout]
#: Backends with fenced settlements: R, Q.
FENCED = [b for b in FAULT_BACKENDS if b.fenced]
#: RabbitMQ workers' AMQP heartbeat in the scenarios where the broker must notice a dead client (seconds).
HEARTBEAT = 1

pytestmark = [pytest.mark.fault, pytest.mark.trait("stores_jobs")]


def on(rows: list[Backend]) -> pytest.MarkDecorator:
    """Run a test on ``rows`` only (an indirect parametrization of the ``connection`` fixture)."""
    return pytest.mark.parametrize("connection", rows, ids=lambda b: b.id, indirect=True)


# -- history helpers ---------------------------------------------------------------------------------


def events(history_dir: Path, name: str, tag: str | None = None, pid: int | None = None) -> list[dict[str, Any]]:
    """The history's ``name`` events, optionally of one tag and one process, in monotonic order."""
    return [
        e
        for e in history.read(history_dir)
        if e["e"] == name and (tag is None or e["tag"] == tag) and (pid is None or e["pid"] == pid)
    ]


def await_event(
    history_dir: Path, name: str, tag: str | None = None, pid: int | None = None, timeout: float = 30
) -> dict[str, Any]:
    """The first ``name`` event (of ``tag``, from ``pid``) once one has been written.

    When none comes, the failure carries what the workers wrote and the history's last events, so that a
    timeout in CI says what the workers were doing instead of only that they did not do it.
    """
    try:
        found: dict[str, Any] = wait_until(
            lambda: next(iter(events(history_dir, name, tag, pid)), None), timeout=timeout
        )
    except AssertionError as exc:
        raise AssertionError(
            f"no {name} event{f' from pid {pid}' if pid else ''}: {exc}\n{postmortem(history_dir)}"
        ) from None
    return found


def postmortem(history_dir: Path, lines: int = 40) -> str:
    """The tail of every worker's log and the history's last events: what a failed wait reports."""
    parts = []
    for log in sorted(history_dir.glob("worker-*.log")):
        tail = log.read_text(errors="replace").splitlines()[-lines:]
        parts.append(f"--- {log.name} (last {len(tail)} lines)\n" + "\n".join(tail))
    recent = history.read(history_dir)[-lines:]
    parts.append("--- history (last events)\n" + "\n".join(str(e) for e in recent))
    return "\n".join(parts)


def lease(backend: Backend, connection: Queue) -> int:
    """What a frozen holder must outlast: the visibility timeout, or RabbitMQ's heartbeat interval."""
    return connection.visibility_timeout() if isinstance(connection, RenewableQueue) else HEARTBEAT


def touch(connection: Queue, *queue_names: str) -> None:
    """Create (SQS) or declare (RabbitMQ, so the teardown deletes it) each queue from the test process."""
    for name in queue_names:
        connection.size(name)


def settled_view(store: Any, queue_name: str) -> Any:
    """The store's jobs and reservations without the live lease's expiry (which its renewals move)."""
    if isinstance(store, stores.RedisStore):
        keys = store._keys(queue_name)
        return (
            store.client.lrange(keys.pending, 0, -1),
            store.client.zrange(keys.delayed, 0, -1, withscores=True),
            store.client.zrange(keys.leased, 0, -1),
        )
    assert isinstance(store, stores.SqlStore)
    return store._execute(
        f"SELECT id, job_id, args, attempts, available_at, reserved_token FROM {stores.TABLE} "
        "WHERE queue = %s ORDER BY id",
        [queue_name],
    )


def failed_record_errors(queue_name: str) -> list[tuple[str, str, str]]:
    """(job class, exception class, message) of each FailedJob record of the queue: what went wrong, if anything."""
    from kinetis_queue.models import FailedJob

    return list(
        FailedJob.objects.filter(queue=queue_name).values_list("job_class", "exception_class", "exception_message")
    )


def stop_all(*processes: subprocess.Popen[bytes]) -> None:
    """SIGCONT and SIGTERM, once, every worker still running; then wait for each, with SIGKILL after 30 s.

    Once only: a second SIGTERM ends a worker mid-job (or, after run() returned, by the default action).
    """
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


def drain(backend: Backend, connection: Queue, queue_names: list[str], store: Any) -> float:
    """procs.drain, queue by queue, with the store's count: once it reads 0 (reservations, delays and SQS's
    in-flight messages included), one empty pop confirms it. RabbitMQ's count leaves out unacked deliveries,
    and its empty pops are cheap, so it gets the usual three; an empty SQS pop is a 1 s long poll."""
    empties = 3 if backend.recovers_by == "connection" else 1
    return sum(procs.drain(connection, [name], store, empties=empties) for name in queue_names)


# -- A3 -------------------------------------------------------------------------------------------------


@on(FAULT_BACKENDS)
@pytest.mark.timeout(120)
def test_a3_frozen_worker_is_overtaken_and_its_late_ack_follows_the_contract(
    backend: Backend,
    connection: Queue,
    maybe_store: Any,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
) -> None:
    """A3: the holder of a job three leases long is SIGSTOPped until another worker has the job, then SIGCONTed
    (three, as the plan says: the freeze must come before the job ends, and under load noticing its start
    and sending SIGSTOP can take a while; a freeze that came too late fails with what the holder did).

    R/Q: its ack raises StaleJobHandleError(operation=ACK), job_settlement_lost fires, nothing is written
    and the live delivery acks. S: its stale delete is accepted (unfenced). M: the broker dropped the
    frozen connection and requeued the job (attempts unchanged); the late ack is reported as stale and the
    worker goes on, or (when the reset meets the ack's own write) raises and the worker stops.
    """
    rmq = backend.recovers_by == "connection"
    seconds = lease(backend, connection)
    knobs: dict[str, Any] = {"heartbeat": HEARTBEAT} if rmq else {}
    tag = new_tag(run_id, 0)
    touch(connection, queue_name)  # the workers poll before the push
    workers = [procs.spawn(backend, [queue_name], history_dir, "--once", "--sleep=30", **knobs) for _ in range(2)]
    try:
        # Both past their start-up before the push: a holder frozen while the other still starts may hold the
        # default SQLite database's lock (a registry or history write), and the other's start-up reads it.
        for worker in workers:
            await_event(history_dir, "worker.ready", pid=worker.pid, timeout=60)
        pushed = time.monotonic()  # the history's clock (CLOCK_MONOTONIC, one for every process)
        assert push(connection, Tagged(tag, ms=3000 * seconds), queue_name) is not None
        first = await_event(history_dir, "exec.start", tag)
        holder, other = sorted(workers, key=lambda p: p.pid != first["pid"])
        history.record("fault.sigstop", None, target=holder.pid)
        holder.send_signal(signal.SIGSTOP)
        assert not events(history_dir, "exec.done", tag), f"frozen too late\n{postmortem(history_dir)}"
        second = await_event(history_dir, "exec.start", tag, pid=other.pid, timeout=60)
        before = settled_view(maybe_store, queue_name) if backend.fenced else None
        history.record("fault.sigcont", None, target=holder.pid)
        holder.send_signal(signal.SIGCONT)
        holder_code = holder.wait(timeout=60)
        live_acked_first = bool(events(history_dir, "settle.ack.ok", tag, pid=other.pid))
        after = settled_view(maybe_store, queue_name) if backend.fenced else None
        other_code = other.wait(timeout=60)
    finally:
        stop_all(*workers)
    drain_s = drain(backend, connection, [queue_name], maybe_store)

    stale = events(history_dir, "settle.ack.stale", tag)
    holder_acks = events(history_dir, "settle.ack.ok", tag, pid=holder.pid)
    holder_stops = events(history_dir, "worker.stop", pid=holder.pid)
    if backend.fenced:
        outcome = "rejected" if stale and not holder_acks else "accepted"
    elif holder_stops:
        outcome = "ack raised " + " from ".join(holder_stops[0]["cause"]) + "; worker stopped"
    else:
        outcome = "accepted" if holder_acks else "none"
    report = finish(
        "A3-frozen-worker",
        backend.id,
        seed,
        history_dir,
        queue_name,
        store=maybe_store,
        drain_s=drain_s,
        extra={
            "redelivery_s": round(second["mono"] - first["mono"], 3),
            "stale_outcome": outcome,
            "attempts": [first["attempt"], second["attempt"]],
            "exit_codes": [holder_code, other_code],
            "live_ack_before_stale": live_acked_first,
        },
    )
    assert report["lost"] == 0 and report["unexpected"] == 0
    assert report["executions"] == 2 and report["executed_unique"] == 1
    assert report["store_remaining"] in (0, None)
    # Not taken back before the lease (or heartbeat) ran out. The lease starts at the reservation, which comes
    # between the push and the first exec.start: measured from that start, a loaded machine's slow start of the
    # job read as an early take-back (0.998 s of a 1 s lease, sql-postgres).
    assert second["mono"] - pushed >= seconds
    assert events(history_dir, "settle.ack.ok", tag, pid=other.pid), "the live delivery did not ack"
    assert other_code == 0
    if backend.fenced:
        assert [(e["pid"], e["error"], e["error_operation"]) for e in stale] == [
            (holder.pid, "StaleJobHandleError", "ack")
        ]
        assert holder_acks == [] and holder_code == 0
        assert second["attempt"] == first["attempt"] + 1
        assert report["stale_rejected"] == 1 and report["stale_accepted"] == 0 and report["acked_twice"] == 0
        if not live_acked_first:
            assert after == before, "the stale ack wrote to the store"
    elif rmq:
        assert second["attempt"] == first["attempt"]  # a broker requeue keeps the count
        # The late ack either finds the connection known dead (ack_many() reports the delivery stale: the broker
        # requeued it, nothing is written, the worker goes on) or meets the reset on its write (the ack raises
        # and the worker stops at the settlement, as before). Either way nothing was acked twice or lost.
        if stale:
            assert [(e["pid"], e["error"], e["error_operation"]) for e in stale] == [
                (holder.pid, "StaleJobHandleError", "ack")
            ]
            assert holder_code == 0 and holder_stops == []
        else:
            assert holder_code != 0 and [e["step"] for e in holder_stops] == ["settle"]
        assert holder_acks == []
    else:
        assert second["attempt"] == first["attempt"] + 1
        assert holder_acks, "SQS: the stale delete should be accepted (unfenced)"


# -- A4 -------------------------------------------------------------------------------------------------


@on(FAULT_BACKENDS)
@pytest.mark.timeout(120)
@pytest.mark.parametrize("concurrency", [1, 8], ids=["c1", "c8"])
def test_a4_sigterm_and_sigint_let_the_running_job_finish_and_stop_the_worker(
    concurrency: int,
    backend: Backend,
    connection: Queue,
    maybe_store: Any,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
) -> None:
    """A4: SIGTERM / SIGINT mid-job: the job finishes and acks, the worker exits 0 without popping again.
    SIGTERM during an idle pop() wait: exit 0 within that wait; a job the interrupted pop() returns still runs
    and settles. Three workers at once, on three queues. At concurrency 8 a job pushed while the first
    one runs may be taken by a free slot before the signal: then it runs and settles too."""
    names = {"SIGTERM": queue_name, "SIGINT": f"{queue_name}-int", "idle": f"{queue_name}-idle"}
    touch(connection, *names.values())
    tags = {case: new_tag(run_id, i) for i, case in enumerate(names)}
    # Held until the test has signalled its worker: a job of a fixed second could end before a loaded machine's
    # test sent the signal, and its worker then rightly took the next job (SIGINT: popped again, c1-rabbitmq).
    releases = {case: history_dir / f"release-{case}" for case in ("SIGTERM", "SIGINT")}
    for case, release in releases.items():
        push(connection, Held(tags[case], str(release)), names[case])
    push(connection, Tagged(tags["idle"]), names["idle"])
    idle_wait = 1
    workers = {
        case: procs.spawn(backend, [name], history_dir, f"--sleep={idle_wait}", f"--concurrency={concurrency}")
        for case, name in names.items()
    }
    figures: dict[str, Any] = {}
    try:
        for case in ("SIGTERM", "SIGINT"):
            await_event(history_dir, "exec.start", tags[case], pid=workers[case].pid)
            push(connection, Tagged(f"{tags[case]}-next"), names[case])  # must stay queued
            history.record(f"fault.{case.lower()}", None, target=workers[case].pid)
            workers[case].send_signal(getattr(signal, case))
            releases[case].touch()  # the job ends after the signal, whenever the worker runs it
        await_event(history_dir, "settle.ack.ok", tags["idle"], pid=workers["idle"].pid)
        history.record("fault.sigterm", None, target=workers["idle"].pid)
        signalled = time.monotonic()
        workers["idle"].send_signal(signal.SIGTERM)
        push(connection, Tagged(f"{tags['idle']}-late"), names["idle"])  # may reach the interrupted pop()
        figures["idle_exit_code"] = workers["idle"].wait(timeout=60)
        figures["idle_signal_to_exit_s"] = round(time.monotonic() - signalled, 2)
        for case in ("SIGTERM", "SIGINT"):
            figures[f"{case}_exit_code"] = workers[case].wait(timeout=60)
        left = {case: maybe_store.remaining(name) if maybe_store is not None else None for case, name in names.items()}
    finally:
        stop_all(*workers.values())
    late = f"{tags['idle']}-late"
    figures["late_job_taken_by_interrupted_pop"] = bool(events(history_dir, "exec.start", late, workers["idle"].pid))
    drain_s = drain(backend, connection, list(names.values()), maybe_store)
    report = finish(
        "A4-graceful-stop" + ("" if concurrency == 1 else f"-c{concurrency}"),
        backend.id,
        seed,
        history_dir,
        queue_name,
        store=maybe_store,
        drain_s=drain_s,
        extra=figures,
    )

    for case in ("SIGTERM", "SIGINT"):
        pid = workers[case].pid
        assert figures[f"{case}_exit_code"] == 0
        assert len(events(history_dir, "exec.done", tags[case], pid)) == 1
        assert len(events(history_dir, "settle.ack.ok", tags[case], pid)) == 1
        if concurrency == 1:
            assert events(history_dir, "exec.start", f"{tags[case]}-next", pid) == [], f"{case}: popped again"
            assert left[case] in (1, None)
        elif events(history_dir, "exec.start", f"{tags[case]}-next", pid):
            assert events(history_dir, "settle.ack.ok", f"{tags[case]}-next", pid), f"{case}: taken, not settled"
    assert figures["idle_exit_code"] == 0
    assert figures["idle_signal_to_exit_s"] < idle_wait + 5  # one pop() wait, not a hang
    if figures["late_job_taken_by_interrupted_pop"]:
        assert events(history_dir, "settle.ack.ok", late, workers["idle"].pid), "a popped job was not settled"
    assert report["lost"] == 0 and report["unexpected"] == 0 and report["duplicated"] == 0
    assert report["executed_unique"] == report["acknowledged"] == 6
    assert report["worker_stops"] == 0


# -- A5 -------------------------------------------------------------------------------------------------


@on(RENEWING)
@pytest.mark.timeout(120)
def test_a5_a_job_longer_than_its_lease_runs_once_while_renewed(
    backend: Backend,
    connection: Queue,
    maybe_store: Any,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
) -> None:
    """A5: jobs of 3 x VT, one sleeping and one a CPU-bound pure-Python loop, with renewal: another popper
    never gets them while they run. Negative control, renewal off: the same popper takes the job over
    while it still runs (the test can fail)."""
    vt = lease(backend, connection)
    renewed, control = queue_name, f"{queue_name}-norenew"
    touch(connection, control)
    sleeping, spinning, unrenewed = (new_tag(run_id, i) for i in range(3))
    push(connection, Tagged(sleeping, ms=3000 * vt), renewed)
    push(connection, Spins(spinning, ms=3000 * vt), renewed)
    push(connection, Tagged(unrenewed, ms=3000 * vt), control)
    workers = [procs.spawn(backend, [renewed], history_dir, "--sleep=1") for _ in range(2)]
    workers.append(procs.spawn(backend, [control], history_dir, "--sleep=1", no_renewal=True))
    reclaimed: list[str] = []
    taken_over: dict[str, Any] = {}
    try:
        for tag in (sleeping, spinning, unrenewed):
            await_event(history_dir, "exec.start", tag)

        def running(tag: str) -> bool:
            return not events(history_dir, "exec.done", tag)

        # A bounded negative observation: the test pops both queues while the jobs run.
        deadline = time.monotonic() + 60
        while running(sleeping) or running(spinning) or not taken_over:
            if running(sleeping) or running(spinning):
                job = connection.pop(0.2, [renewed])
                if job is not None:
                    reclaimed.append(str(job.args.get("tag")))
                    connection.ack(job)
            if not taken_over:
                job = connection.pop(0.2, [control])
                if job is not None:
                    taken_over = {"still_running": running(unrenewed), "attempt": job.attempts}
                    history.record("exec.start", unrenewed, attempt=job.attempts, role="control-popper")
                    history.record("exec.done", unrenewed, attempt=job.attempts, role="control-popper")
                    connection.ack(job)
                    history.record("settle.ack.ok", unrenewed, attempt=job.attempts)
            assert time.monotonic() < deadline, "the long jobs did not finish"
        wait_until(lambda: events(history_dir, "exec.done", unrenewed, workers[2].pid), timeout=30)
        wait_until(lambda: maybe_store is None or maybe_store.remaining(renewed) == 0, timeout=30)
    finally:
        stop_all(*workers)
    drain_s = drain(backend, connection, [renewed, control], maybe_store)
    report = finish(
        "A5-long-job",
        backend.id,
        seed,
        history_dir,
        queue_name,
        store=maybe_store,
        drain_s=drain_s,
        extra={
            "reclaims_while_alive": len(reclaimed),
            "negative_control": taken_over,
            "exit_codes": [w.returncode for w in workers],
        },
    )

    assert reclaimed == [], "a renewed job was delivered again while it ran"
    assert [w.returncode for w in workers] == [0, 0, 0]
    for tag in (sleeping, spinning):
        assert len(events(history_dir, "exec.start", tag)) == 1 and len(events(history_dir, "exec.done", tag)) == 1
    assert taken_over.get("still_running") is True, "renewal off, yet the job was not taken over: the test is blind"
    assert report["overlapping_live_leases"] == 1  # the control's two executions, and only those
    assert report["lost"] == 0 and report["unexpected"] == 0


# -- A6 -------------------------------------------------------------------------------------------------


@on(FAULT_BACKENDS)
@pytest.mark.timeout(120)
def test_a6_delays_longer_than_the_lease_run_once_and_never_early(
    backend: Backend,
    connection: Queue,
    maybe_store: Any,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
) -> None:
    """A6 (Celery's ETA trap): 20 jobs delayed 3 x VT (R, Q), DelaySeconds (S), through the ladder (M), and
    2 jobs whose failed first attempt is released with the same delay: each runs exactly once (the released
    ones once per attempt), never before its delay, and nothing is redelivered while it waits."""
    delay = 3 * lease(backend, connection)
    delayed = [new_tag(run_id, i) for i in range(20)]
    released = [new_tag(run_id, 100 + i) for i in range(2)]
    for tag in delayed:
        assert push(connection, Tagged(tag), queue_name, delay=delay) is not None
    for tag in released:
        assert push(connection, FailsFirstAttempt(tag), queue_name, max_attempts=2) is not None
    worker = Worker(connection, retry_base_delay=delay)
    deadline = time.monotonic() + 60
    try:
        while len({e["tag"] for e in events(history_dir, "exec.done")}) < len(delayed) + len(released):
            assert time.monotonic() < deadline, "the delayed jobs did not all run"
            worker.process_next(0.5, [queue_name])
    finally:
        worker.close()
    drain_s = drain(backend, connection, [queue_name], maybe_store)

    pushed_at = {e["tag"]: e["mono"] for e in events(history_dir, "push.invoke")}
    starts: dict[str, list[dict[str, Any]]] = {}
    for e in events(history_dir, "exec.start"):
        starts.setdefault(e["tag"], []).append(e)
    lateness = [starts[tag][0]["mono"] - pushed_at[tag] - delay for tag in delayed]
    raised = {e["tag"]: e["mono"] for e in events(history_dir, "exec.raise")}
    lateness += [starts[tag][1]["mono"] - raised[tag] - delay for tag in released if len(starts[tag]) > 1]
    report = finish(
        "A6-delay-beyond-lease",
        backend.id,
        seed,
        history_dir,
        queue_name,
        store=maybe_store,
        drain_s=drain_s,
        extra={
            "delay_s": delay,
            "early_executions": sum(1 for s in lateness if s < 0),
            "lateness_p50_s": round(statistics.median(lateness), 3),
            "lateness_max_s": round(max(lateness), 3),
        },
    )

    assert {tag: len(starts[tag]) for tag in delayed} == dict.fromkeys(delayed, 1)
    assert {tag: [e["attempt"] for e in starts[tag]] for tag in released} == {key: [1, 2] for key in released}
    assert report["early_executions"] == 0, lateness
    assert report["lost"] == 0 and report["unexpected"] == 0 and report["duplicated"] == 0
    assert report["executed_unique"] == 22
    assert report["store_remaining"] in (0, None)


# -- A7 -------------------------------------------------------------------------------------------------


@on(FAULT_BACKENDS)
@pytest.mark.timeout(210)
def test_a7_a_poison_pill_is_redelivered_without_blocking_the_queue(
    backend: Backend,
    connection: Queue,
    maybe_store: Any,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
    tmp_path: Path,
) -> None:
    """A7 (CI-lite): a job that ends its worker with os._exit(137) on every attempt, pushed ahead of 30
    normal jobs, 2 workers respawned by the harness. The normal jobs all complete; the pill keeps coming
    back (contract: unbounded), with attempts growing on R/Q/S and unchanged on M."""
    armed = tmp_path / "armed"
    armed.touch()
    pill = new_tag(run_id, 0)
    normal = [new_tag(run_id, i) for i in range(1, 31)]
    push(connection, ExitsEveryAttempt(pill, str(armed)), queue_name)
    for tag in normal:
        push(connection, Tagged(tag, ms=10), queue_name)
    started = time.monotonic()
    deadline = started + 90  # on a loaded machine each of the pill's kills costs a slow respawn

    def done() -> bool:
        # Three pill deliveries and every normal job done. A head-of-line block shows as normal jobs still
        # waiting at the deadline (on a loaded machine the pill may well come back more than three times
        # before 30 jobs of 10 ms are through: respawned workers are slow to start, so no count is a bound).
        finished = {e["tag"] for e in events(history_dir, "exec.done")}
        pills = len(events(history_dir, "exec.start", pill))
        return pills >= 3 and set(normal) <= finished

    # Each delivery of the pill is held for 5 s after its worker died (1 s is the test connection's): on a
    # loaded machine a worker takes longer than 1 s to start, and the pill, visible again before any worker
    # was up, ended every new worker first (3 of 30 normal jobs done in 90 s at a load average of 19).
    with procs.Pool(backend, [queue_name], history_dir, 2, "--sleep=1", visibility_timeout=5) as pool:
        while not done() and time.monotonic() < deadline:
            pool.respawn()  # the harness's supervisor: a worker the pill ended is replaced
            time.sleep(0.1)
    elapsed = time.monotonic() - started
    armed.unlink()
    deliveries = events(history_dir, "exec.start", pill)
    normal_done = len({e["tag"] for e in events(history_dir, "exec.done") if e["tag"] in normal})
    drain_s = drain(backend, connection, [queue_name], maybe_store)
    report = finish(
        "A7-poison-pill",
        backend.id,
        seed,
        history_dir,
        queue_name,
        store=maybe_store,
        drain_s=drain_s,
        extra={
            "pill_deliveries": len(deliveries),
            "pill_attempts": [e["attempt"] for e in deliveries],
            "pill_deliveries_per_min": round(60 * len(deliveries) / elapsed, 1),
            "normal_done_before_drain": normal_done,
            "run_s": round(elapsed, 1),
            "worker_exits": sorted(Counter(pool.exits).items()),
            "failed_record_errors": failed_record_errors(queue_name),
        },
    )

    assert len(deliveries) >= 3
    attempts = [e["attempt"] for e in deliveries]
    if backend.recovers_by == "connection":
        assert set(attempts) == {1}  # a broker requeue keeps the count
    else:
        assert attempts == sorted(attempts) and attempts[-1] > attempts[0]
    assert report["lost"] == 0 and report["unexpected"] == 0 and report["failed_records"] == 0
    assert report["executed_unique"] == len(normal) + 1  # the pill too, once disarmed for the drain
    assert report["store_remaining"] in (0, None)
    # RabbitMQ requeues the pill at the head; the next pop moves it behind the waiting jobs.
    assert normal_done == len(normal), "the pill held the normal jobs back"


# -- A9 -------------------------------------------------------------------------------------------------


class Raises(logging.Handler):
    """A log handler that raises on every record: a broken logging setup."""

    def emit(self, record: logging.LogRecord) -> None:
        raise RuntimeError("a broken log handler")


@pytest.fixture
def broken_observers() -> Iterator[None]:
    """Receivers of every outcome signal and a handler of the package's logger, all raising."""

    def receiver(sender: Any, **kwargs: Any) -> None:
        raise RuntimeError("a broken receiver")

    outcome_signals = (signals.job_succeeded, signals.job_released, signals.job_failed_permanently)
    for signal_ in outcome_signals:
        signal_.connect(receiver, weak=False)
    package = logging.getLogger("kinetis_queue")
    handler, level = Raises(), package.level
    package.addHandler(handler)
    package.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        package.removeHandler(handler)
        package.setLevel(level)
        for signal_ in outcome_signals:
            signal_.disconnect(receiver)


@on(FENCED)
@pytest.mark.timeout(60)
@pytest.mark.logs_errors("django.dispatch")  # the broken receivers are logged
def test_a9_observers_that_raise_decide_nothing(
    backend: Backend,
    connection: Queue,
    maybe_store: Any,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
    broken_observers: None,
) -> None:
    """A9: with every outcome receiver and the logger raising, 10 jobs succeed, 5 fail for good (recorded)
    and 5 are released once then succeed: one transition per delivery, and the worker keeps running."""
    ok = [new_tag(run_id, i) for i in range(10)]
    failing = [new_tag(run_id, 100 + i) for i in range(5)]
    retried = [new_tag(run_id, 200 + i) for i in range(5)]
    for tag in ok:
        push(connection, Tagged(tag), queue_name)
    for tag in failing:
        push(connection, TaggedFails(tag), queue_name, max_attempts=1)
    for tag in retried:
        push(connection, FailsFirstAttempt(tag), queue_name, max_attempts=2)
    worker = Worker(connection, retry_base_delay=0)
    try:
        reason = worker.run(0.5, [queue_name], stop_when_empty=True)
    finally:
        worker.close()
    drain_s = drain(backend, connection, [queue_name], maybe_store)

    transitions = Counter(
        (e["tag"], e["attempt"])
        for e in history.read(history_dir)
        if e["e"] in ("settle.ack.ok", "settle.release.ok", "settle.fail.ok")
    )
    deliveries = Counter((e["tag"], e["attempt"]) for e in events(history_dir, "exec.start"))
    report = finish(
        "A9-observers-throw",
        backend.id,
        seed,
        history_dir,
        queue_name,
        store=maybe_store,
        drain_s=drain_s,
        extra={
            "exit_reason": str(reason),
            "deliveries": sum(deliveries.values()),
            "transitions": sum(transitions.values()),
        },
    )

    assert reason is ExitReason.EMPTY
    assert transitions == deliveries and set(transitions.values()) == {1}
    assert sum(deliveries.values()) == 10 + 5 + 2 * 5
    assert report["failed_records"] == 5 and report["executed_unique"] == 15
    assert report["lost"] == 0 and report["store_remaining"] == 0 and report["worker_stops"] == 0
