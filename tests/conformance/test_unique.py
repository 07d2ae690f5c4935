"""Unique jobs on every backend (kinetis_queue.unique, docs/unique-jobs.md): a push whose key is held writes
nothing and returns the holder's id; the key is freed when the holder settles (or starts, or expires, as its
scope says); debounce replaces a waiting holder's arguments and delay."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

import pytest
from django.conf import settings

from kinetis_queue import JobContext
from kinetis_queue.contracts import Queue
from kinetis_queue.exceptions import DuplicateJobError, InvalidQueueArgumentError, UnknownLockDatabaseError
from kinetis_queue.failed import exception_class_path
from kinetis_queue.models import FailedJob
from kinetis_queue.outcomes import JobOutcome, JobReport
from kinetis_queue.unique import METADATA_KEY, connection_store, without_lock
from kinetis_queue.worker import Worker
from tests import jobs
from tests.support.backends import Backend
from tests.support.helpers import in_thread, wait_until


@pytest.fixture(autouse=True)
def _calls() -> None:
    jobs.CALLS.clear()


def _work(queue: Queue, queue_name: str, n: int = 1) -> list[JobReport]:
    """Run ``n`` deliveries in a worker; the reports of each."""
    reports: list[JobReport] = []
    worker = Worker(queue, recorder=None, reporter=reports.append)
    try:
        for _ in range(n):
            assert worker.process_next(10, [queue_name]) is True
    finally:
        worker.close()
    return reports


def _ran(name: str = "Unique") -> list[tuple[Any, ...]]:
    return [call for call in jobs.CALLS if call[0] == name]


@pytest.mark.trait("stores_jobs")
def test_a_push_whose_key_is_held_returns_the_holders_id_and_stores_nothing(connection: Queue, queue_name: str) -> None:
    first = connection.push(jobs.Unique("a"), queue=queue_name)
    again = connection.push(jobs.Unique("a"), queue=queue_name, delay=5)
    other = connection.push(jobs.Unique("b"), queue=queue_name)

    assert again == first and other != first
    assert connection.size(queue_name) == 2
    assert [report.job_id for report in _work(connection, queue_name, 2)] == [first, other]
    assert [call[1] for call in _ran()] == ["a", "b"]


@pytest.mark.trait("stores_jobs")
def test_once_the_holder_settles_the_next_push_is_a_new_job(connection: Queue, queue_name: str) -> None:
    first = connection.push(jobs.Unique("a"), queue=queue_name)
    [report] = _work(connection, queue_name)
    assert report.outcome is JobOutcome.SUCCEEDED

    second = connection.push(jobs.Unique("a"), queue=queue_name)
    assert second != first
    assert connection.push(jobs.Unique("a"), queue=queue_name) == second


@pytest.mark.trait("stores_jobs")
@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_final_failure_frees_the_key_and_a_retry_keeps_it(connection: Queue, queue_name: str) -> None:
    def fail(context: JobContext) -> None:
        raise RuntimeError("deliberate")

    jobs.CALLBACK[:] = [fail]
    first = connection.push(jobs.UniqueCallsBack(), queue=queue_name, max_attempts=2)
    reports: list[JobReport] = []
    worker = Worker(connection, recorder=None, reporter=reports.append, retry_base_delay=0)
    try:
        assert worker.process_next(10, [queue_name]) is True
        assert reports[-1].outcome is JobOutcome.RELEASED
        assert connection.push(jobs.UniqueCallsBack(), queue=queue_name) == first  # still the holder while retried
        assert worker.process_next(10, [queue_name]) is True
    finally:
        worker.close()
    assert reports[-1].outcome is JobOutcome.FAILED
    assert connection.push(jobs.UniqueCallsBack(), queue=queue_name) != first


@pytest.mark.trait("stores_jobs")
def test_on_duplicate_raise_names_the_holder(connection: Queue, queue_name: str) -> None:
    first = connection.push(jobs.Unique("a"), queue=queue_name)

    with pytest.raises(DuplicateJobError) as raised:
        connection.push(jobs.Unique("a"), queue=queue_name, on_duplicate="raise")

    assert raised.value.job_id == first and first in str(raised.value)
    assert connection.size(queue_name) == 1


@pytest.mark.trait("stores_jobs")
def test_a_push_names_its_own_key_and_lifetime(connection: Queue, queue_name: str) -> None:
    first = connection.push(jobs.Records("x"), queue=queue_name, unique_key="daily-report", unique_for=600)
    assert connection.push(jobs.Records("y"), queue=queue_name, unique_key="daily-report", unique_for=600) == first
    assert connection.push(jobs.Records("x"), queue=queue_name) != first  # not unique without the options
    assert connection.size(queue_name) == 2


@pytest.mark.trait("stores_jobs")
def test_unique_key_method_keys_by_what_it_returns(connection: Queue, queue_name: str) -> None:
    first = connection.push(jobs.UniqueByCustomer(7, "first"), queue=queue_name)
    assert connection.push(jobs.UniqueByCustomer(7, "second"), queue=queue_name) == first
    assert connection.push(jobs.UniqueByCustomer(8, "first"), queue=queue_name) != first


@pytest.mark.trait("stores_jobs")
def test_until_settled_holds_the_key_while_the_job_runs_and_until_started_frees_it(
    connection: Queue, queue_name: str
) -> None:
    """A push made from inside the running holder: "settled" still returns the holder, "started" a new job."""
    seen: dict[str, str] = {}

    def push_again(context: JobContext) -> None:
        seen["settled"] = connection.push(jobs.UniqueCallsBack(), queue=queue_name)
        seen["started"] = connection.push(jobs.UniqueUntilStarted("s"), queue=queue_name)

    jobs.CALLBACK[:] = [push_again]
    holder = connection.push(jobs.UniqueCallsBack(), queue=queue_name)
    started_holder = connection.push(jobs.UniqueUntilStarted("s"), queue=queue_name)
    assert connection.push(jobs.UniqueUntilStarted("s"), queue=queue_name) == started_holder  # still waiting

    [ran] = _work(connection, queue_name, 1)  # the CallsBack job: pushed first, popped first
    assert ran.job_id == holder
    assert seen["settled"] == holder
    assert seen["started"] == started_holder  # that one has not started yet

    [started] = _work(connection, queue_name, 1)
    assert started.job_id == started_holder
    during = connection.push(jobs.UniqueUntilStarted("s"), queue=queue_name)
    assert during != started_holder  # its holder started (and ended): a new job


@pytest.mark.trait("stores_jobs")
def test_until_expired_holds_the_key_after_the_job_settled_until_unique_for_passes(
    connection: Queue, queue_name: str
) -> None:
    # 3 s: the job is pushed, run and settled, and pushed again within unique_for; with 1 s a loaded quorum
    # queue took longer (the key had expired and the second push was a new job).
    first = connection.push(jobs.UniqueForAWhile("a"), queue=queue_name, unique_for=3)
    _work(connection, queue_name)
    assert connection.push(jobs.UniqueForAWhile("a"), queue=queue_name, unique_for=3) == first

    wait_until(lambda: connection.push(jobs.UniqueForAWhile("a"), queue=queue_name, unique_for=3) != first, 30)


@pytest.mark.trait("stores_jobs")
def test_a_key_is_never_held_longer_than_unique_for(connection: Queue, queue_name: str) -> None:
    """The holder never ran: once unique_for passed, a push is a new job (a duplicate, by design)."""
    # 3 s: the second push must come within unique_for of the first, and a loaded quorum queue's push took 0.5 s.
    first = connection.push(jobs.Unique("a"), queue=queue_name, unique_for=3, delay=60)
    assert connection.push(jobs.Unique("a"), queue=queue_name, unique_for=3) == first

    wait_until(lambda: connection.push(jobs.Unique("a"), queue=queue_name, unique_for=3) != first, 30)


@pytest.mark.trait("stores_jobs")
def test_debounce_replaces_the_waiting_holders_arguments_and_delay(
    connection: Queue, queue_name: str, backend: Backend
) -> None:
    """Only the newest push runs, at once, under the holder's id. SQS and RabbitMQ cannot take a message
    back: the older one is delivered too and skipped (acked without running)."""
    first = connection.push(jobs.Debounced("old"), queue=queue_name, delay=60)
    assert connection.push(jobs.Debounced("new"), queue=queue_name) == first

    superseding = backend.id.split("-")[0] in ("sqs", "rabbitmq")
    reports = _work(connection, queue_name, 1)
    assert [(r.job_id, r.outcome) for r in reports] == [(first, JobOutcome.SUCCEEDED)]
    assert [call[1:] for call in _ran("Unique")] == [("new", first)]
    # The superseded message, still delayed (SQS FIFO: hidden by the worker that met it early, out of size()).
    assert connection.size(queue_name) == (1 if superseding and backend.counts_delayed_push else 0)
    # The holder started: the next push is a new job.
    assert connection.push(jobs.Debounced("newer"), queue=queue_name) != first


@pytest.mark.trait("stores_jobs")
def test_a_superseded_delivery_is_skipped(connection: Queue, queue_name: str, backend: Backend) -> None:
    """Both messages due at once: the store that replaces in place has one job; the others deliver both,
    and the older one is acked without running."""
    first = connection.push(jobs.Debounced("old"), queue=queue_name)
    assert connection.push(jobs.Debounced("new"), queue=queue_name) == first

    n = 2 if backend.id.split("-")[0] in ("sqs", "rabbitmq") else 1
    reports = _work(connection, queue_name, n)
    assert sorted(r.outcome for r in reports) == sorted([JobOutcome.SUCCEEDED] + [JobOutcome.SKIPPED] * (n - 1))
    assert [call[1] for call in _ran()] == ["new"]
    assert connection.size(queue_name) == 0


@pytest.mark.trait("stores_jobs")
def test_push_many_collapses_the_duplicates_of_a_batch(connection: Queue, queue_name: str) -> None:
    ids = connection.push_many([jobs.Unique("a"), jobs.Noop(), jobs.Unique("a"), jobs.Unique("b")], queue=queue_name)

    assert ids[0] == ids[2] and len(set(ids)) == 3
    assert connection.size(queue_name) == 3


def test_bad_unique_options_are_refused_before_any_io(connection: Queue, queue_name: str) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"unique_key": "k"}, "unique_key needs unique_for"),
        ({"unique_key": "k", "unique_for": 0}, "unique_for must be a number"),
        ({"unique_key": "k", "unique_for": float("nan")}, "unique_for must be a number"),
        ({"unique_key": "k", "unique_for": True}, "unique_for must be a number"),
        ({"unique_key": "", "unique_for": 5}, "unique_key must be a non-empty str"),
        ({"unique_key": 5, "unique_for": 5}, "unique_key must be a non-empty str"),
        ({"unique_key": "k", "unique_for": 5, "unique_until": "later"}, "unique_until must be one of"),
        ({"unique_key": "k", "unique_for": 5, "debounce": True}, "debounce needs unique_until='started'"),
        ({"unique_key": "k", "unique_for": 5, "debounce": "yes"}, "debounce must be True or False"),
        ({"unique_key": "k", "unique_for": 5, "on_duplicate": "ignore"}, "on_duplicate must be one of"),
        ({"unique_until": "started"}, "unique_until needs unique_for"),
    ]
    for options, message in cases:
        with pytest.raises(InvalidQueueArgumentError, match=message):
            connection.push(jobs.Records("x"), queue=queue_name, **options)
    assert connection.size(queue_name) == 0
    assert jobs.CALLS == []


def test_a_unique_key_method_that_raises_is_refused_without_its_message(connection: Queue, queue_name: str) -> None:
    with pytest.raises(InvalidQueueArgumentError) as raised:
        connection.prepare(jobs.UniqueKeyRaises("a"), queue=queue_name)
    assert "raised ValueError" in str(raised.value) and "secret" not in str(raised.value)


def test_sync_runs_each_push_and_holds_the_key_only_while_it_runs(queue_name: str) -> None:
    from kinetis_queue import queues

    sync = queues["sync"]
    seen: list[str] = []

    def push_again(context: JobContext) -> None:
        seen.append(sync.push(jobs.UniqueCallsBack(), queue=queue_name))

    jobs.CALLBACK[:] = [push_again, lambda context: None]
    first = sync.push(jobs.UniqueCallsBack(), queue=queue_name)
    assert seen == [first]  # the push from inside the running holder gave way
    jobs.CALLBACK[:] = [lambda context: None]
    assert sync.push(jobs.UniqueCallsBack(), queue=queue_name) != first  # settled: a new run
    assert len([c for c in jobs.CALLS if c[0] == "CallsBack"]) == 2


def _naming_lock_database(connection: Queue, queue_name: str, job: Any, database: str) -> str:
    """Store ``job`` as a unique job whose lock's metadata names ``database`` (what a push made under other
    settings, or a forged message, carries): a plain push of the envelope, no key taken. Its id."""
    prepared = connection.prepare(job, queue=queue_name)
    metadata = {**prepared.envelope.metadata}
    metadata[METADATA_KEY] = {**metadata[METADATA_KEY], "db": database}
    connection.send(without_lock(replace(prepared, envelope=replace(prepared.envelope, metadata=metadata))))
    return prepared.id


@pytest.mark.trait("stores_jobs")
@pytest.mark.parametrize("job_class", [jobs.Unique, jobs.UniqueUntilStarted], ids=["settled", "started"])
@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_lock_naming_a_database_the_worker_does_not_keep_locks_in_fails_the_job_once_recorded(
    connection: Queue, queue_name: str, job_class: type[jobs.Unique]
) -> None:
    """Issue 27 item 4: the lock's database comes from the worker's settings. A job whose metadata names an
    alias the worker lacks (renamed, removed) or another of its databases fails at once, without running,
    with a FailedJob record; before, it was deferred forever ("started") or ran again on every redelivery
    ("settled")."""
    ours = connection_store(connection).database
    other = next(alias for alias in settings.DATABASES if alias != ours)
    ids = [
        _naming_lock_database(connection, queue_name, job_class("renamed"), "renamed-since"),
        _naming_lock_database(connection, queue_name, job_class("other"), other),
    ]

    reports: list[JobReport] = []
    worker = Worker(connection, reporter=reports.append, retry_base_delay=0)
    try:
        for _ in ids:
            assert worker.process_next(10, [queue_name]) is True
    finally:
        worker.close()
    assert connection.size(queue_name) == 0  # settled: nothing comes back

    assert sorted((r.job_id, r.outcome) for r in reports) == sorted((i, JobOutcome.FAILED) for i in ids)
    assert _ran() == []
    records = FailedJob.objects.filter(job_id__in=ids)
    assert sorted(r.job_id for r in records) == sorted(ids)
    for record in records:
        assert record.exception_class == exception_class_path(UnknownLockDatabaseError("x", None, None))
        assert record.attempts == 1 and "unique locks in" in record.exception_message
    FailedJob.objects.filter(job_id__in=ids).delete()


#: Item 16's test: pushers racing on one key, the key's short lifetime, and how many holders to see.
RACERS = 3
RACE_LIFETIME = 0.25
RACE_HOLDERS = 4


@pytest.mark.trait("stores_jobs")
def test_concurrent_pushes_taking_over_an_expired_key_keep_every_acknowledged_job(
    connection: Queue, queue_name: str
) -> None:
    """Issue 27 item 16: a holder never run whose key expired, then pushes of the key from several threads at
    once. Each acknowledged push gives the holder's id or, once the key expired, a new job's; every id any
    push acknowledged is stored exactly once: a takeover never deletes nor overwrites the former holder.
    (The Django-database store in each outbox database: tests/integrations/test_outbox.py.)"""
    race_for_one_key(connection, queue_name)


def race_for_one_key(connection: Queue, queue_name: str) -> None:
    """RACERS threads push one unique key (unique_for RACE_LIFETIME) until RACE_HOLDERS holders took it in
    turn (the expiry is awaited, not slept); then every id a push acknowledged is delivered exactly once."""
    acknowledged: list[str] = []
    seen = threading.Lock()

    def holders() -> int:
        with seen:
            return len(set(acknowledged))

    def race() -> None:
        deadline = time.monotonic() + 60
        while holders() < RACE_HOLDERS and time.monotonic() < deadline:
            job_id = connection.push(jobs.Unique("race"), queue=queue_name, unique_for=RACE_LIFETIME)
            with seen:
                acknowledged.append(job_id)

    threads = [in_thread(race) for _ in range(RACERS)]
    for thread in threads:
        thread.join(90)
    expected = sorted(set(acknowledged))
    assert len(expected) >= RACE_HOLDERS, f"{len(expected)} holders in 60 s"

    delivered: list[str] = []
    while True:
        reserved = connection.pop_many(0.5, [queue_name], 50)
        if not reserved.jobs:
            break
        delivered += [job.id for job in reserved.jobs]
        connection.ack_many(reserved.jobs)
    assert sorted(delivered) == expected, f"{len(acknowledged)} pushes acknowledged, {len(expected)} distinct ids"
