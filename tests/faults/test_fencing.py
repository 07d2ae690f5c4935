"""F1-F3, stale settlements after a reclaim (RELIABILITY.md §3 F).

Contract: "Delivery receipts and stale settlements". On a fenced backend (Redis, SQL) a settlement
naming a finished delivery raises StaleJobHandleError with its operation and writes nothing: the
store is compared byte for byte before and after. renew() of a stale handle claims nothing and
changes nothing ("Reservation renewal").
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinetis_queue.contracts import JobSettlement, Queue, QueuedJob
from kinetis_queue.exceptions import InvalidQueueArgumentError, StaleJobHandleError
from tests.faults import procs
from tests.faults.conftest import soak_scale, soak_seconds
from tests.faults.harness import finish, push
from tests.faults.history import new_tag
from tests.faults.jobs import RandomDuration, Tagged
from tests.support.backends import Backend
from tests.support.helpers import wait_until

pytestmark = [pytest.mark.trait("stores_jobs", "fenced")]

OPERATIONS = {
    JobSettlement.ACK: lambda q, job: q.ack(job),
    JobSettlement.RELEASE: lambda q, job: q.release(job),
    JobSettlement.FAIL: lambda q, job: q.fail(job),
}


def _reclaimed(connection: Queue, store: Any, queue_name: str, tag: str) -> tuple[QueuedJob, QueuedJob]:
    """A job whose first delivery's reservation expired and was taken over by a second pop().

    Its push is not recorded in the history: the test settles deliveries by hand and runs no job.
    """
    connection.push(Tagged(tag), queue=queue_name)
    first = connection.pop(5, [queue_name])
    assert first is not None
    store.expire(first)
    second = connection.pop(5, [queue_name])
    assert second is not None
    assert (second.id, second.attempts) == (first.id, first.attempts + 1)
    assert second.handle != first.handle
    return first, second


@pytest.mark.fault
@pytest.mark.timeout(60)
def test_stale_settlements_are_rejected_and_write_nothing(
    backend: Backend, connection: Queue, store: Any, queue_name: str, history_dir: Path, seed: int, run_id: str
) -> None:
    """F1: ack/release/fail(h1) raise with the right operation; renew(h1) changes nothing; bytes compared."""
    matrix: dict[str, str] = {}
    for index, operation in enumerate([*OPERATIONS, "renew"]):
        first, second = _reclaimed(connection, store, queue_name, new_tag(run_id, index))
        before = store.snapshot(queue_name)
        if operation == "renew":
            connection.renew(first)  # type: ignore[attr-defined]
            outcome = "no-op"
        else:
            with pytest.raises(StaleJobHandleError) as raised:
                OPERATIONS[operation](connection, first)  # type: ignore[index]
            assert raised.value.operation is operation
            outcome = "rejected"
        assert store.snapshot(queue_name) == before, f"a stale {operation} wrote to the store"
        matrix[str(operation)] = f"{outcome}, 0 bytes changed"
        # The live delivery still settles, exactly once.
        connection.ack(second)
        with pytest.raises(StaleJobHandleError):
            connection.ack(second)
        assert store.remaining(queue_name) == 0
    report = finish(
        "F1-fencing-matrix",
        backend.id,
        seed,
        history_dir,
        queue_name,
        store=store,
        extra={"matrix": {**matrix, "second ack(h2)": "rejected x4"}, "stale_rejected": 7, "stale_accepted": 0},
    )
    assert report["store_remaining"] == 0


def _forge(handle: Any, how: str, other: Any) -> Any:
    """A receipt changed the way a bug or an attacker could: every text field of it mutated alike."""
    if how == "other":
        return other

    def mutate(text: str) -> str:
        return {
            "upper": text.upper(),
            "lower": text.lower(),
            "truncate": text[:-1],
            "append": text + "0",
            "swapcase": text.swapcase(),
        }[how]

    if isinstance(handle, str):
        return mutate(handle)
    if isinstance(handle, tuple) and hasattr(handle, "_replace"):
        return handle._replace(**{k: mutate(v) for k, v in handle._asdict().items() if isinstance(v, str)})
    raise AssertionError(f"cannot forge a {type(handle).__name__}")


@pytest.mark.fault
@pytest.mark.timeout(120)
def test_forged_handles_never_write(backend: Backend, connection: Queue, store: Any, queue_name: str) -> None:
    """F3: a receipt differing in case only, truncated, extended, or a finished delivery's: stale or invalid,
    never a write."""
    push(connection, Tagged("forged-target"), queue_name)
    push(connection, Tagged("forged-other"), queue_name)
    live = connection.pop(5, [queue_name])
    other = connection.pop(5, [queue_name])
    assert live is not None and other is not None
    connection.ack(other)  # its receipt now names a finished delivery

    @settings(settings.get_profile("kq-ci"), max_examples=40)
    @given(
        how=st.sampled_from(["upper", "lower", "truncate", "append", "swapcase", "other"]),
        operation=st.sampled_from(list(OPERATIONS)),
    )
    def attempt(how: str, operation: JobSettlement) -> None:
        forged = dataclasses.replace(live, handle=_forge(live.handle, how, other.handle))
        if forged.handle == live.handle:
            return  # the mutation changed nothing (a handle already in that case)
        before = store.snapshot(queue_name)
        with pytest.raises((StaleJobHandleError, InvalidQueueArgumentError)):
            OPERATIONS[operation](connection, forged)
        assert store.snapshot(queue_name) == before

    attempt()
    connection.ack(live)
    assert store.remaining(queue_name) == 0


def race(
    scenario: str,
    backend: Backend,
    connection: Queue,
    store: Any,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
    *,
    jobs: int,
    workers: int,
) -> dict[str, Any]:
    """F2: renewal off, jobs of U(0.5, 1.5) x VT: leases expire under running jobs and get reclaimed."""
    rng = random.Random(seed)
    for i in range(jobs):
        push(connection, RandomDuration(new_tag(run_id, i), 500, 1500, rng.randrange(2**31)), queue_name)
    with procs.Pool(
        backend, [queue_name], history_dir, workers, "--sleep=0.5", no_renewal=True, visibility_timeout=1
    ) as pool:
        wait_until(lambda: store.remaining(queue_name) == 0, timeout=600, interval=0.2)
    drain_s = procs.drain(connection, [queue_name], store)
    report = finish(
        scenario,
        backend.id,
        seed,
        history_dir,
        queue_name,
        store=store,
        drain_s=drain_s,
        extra={"unexpected_exits": pool.unexpected_exits()},
    )
    assert report["lost"] == 0 and report["unexpected"] == 0
    assert report["stale_accepted"] == 0 and report["acked_twice"] == 0
    assert report["executed_unique"] == jobs
    assert report["store_remaining"] == 0
    assert report["worker_stops"] == 0
    return report


@pytest.mark.fault
@pytest.mark.timeout(240)
def test_randomized_lease_races_accept_no_stale_settlement(
    backend: Backend, connection: Queue, store: Any, queue_name: str, history_dir: Path, seed: int, run_id: str
) -> None:
    """F2 (CI): 16 jobs, 4 workers, renewal off: per job exactly one accepted terminal settlement."""
    report = race(
        "F2-lease-race", backend, connection, store, queue_name, history_dir, seed, run_id, jobs=16, workers=4
    )
    assert report["stale_rejected"] > 0, "no lease was reclaimed under a running job: the race never happened"


@pytest.mark.soak
@pytest.mark.timeout(int(soak_seconds()) + 900)
def test_randomized_lease_races_soak(
    backend: Backend, connection: Queue, store: Any, queue_name: str, history_dir: Path, seed: int, run_id: str
) -> None:
    """F2 (soak): 1000 jobs (scaled down with a KQ_SOAK_SECONDS under 30 minutes), 4 workers, renewal off."""
    race(
        "F2-lease-race-soak",
        backend,
        connection,
        store,
        queue_name,
        history_dir,
        seed,
        run_id,
        jobs=max(100, int(1000 * soak_scale())),
        workers=4,
    )
