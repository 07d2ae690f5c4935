"""What the worker does between the pop and the attempt (kinetis_queue/worker/delivery.py ``_admit``) and with the
slots it holds (kinetis_queue/limits/keeper.py), where the conformance suite does not reach: a slot given back when
the delivery is superseded or its lock store fails, a skip or a deferral refused as stale, a bad concurrency key,
unreadable lock data, slot renewals that fail or run slow, a slot that cannot be given back. Redis with its outbox
(and so its unique locks) in SQLite ("redislite") has both a store of its own for the slots and the Django-database
lock store, whose debounced pushes supersede a waiting delivery."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.conf import settings
from django.db import connections as db_connections

from kinetis_queue import JobContext, connections, limit_concurrency
from kinetis_queue.backends.redis import RedisQueue
from kinetis_queue.contracts import JobSettlement, Queue
from kinetis_queue.limits import STORE_FAILURE_DELAY, slot_key, slot_store_of
from kinetis_queue.limits.models import LimitSlot
from kinetis_queue.outcomes import JobOutcome, JobReport
from kinetis_queue.unique import METADATA_KEY
from kinetis_queue.worker import Worker
from tests import jobs
from tests.faults.faultproxy import FaultProxy, Latency, Pass
from tests.support.backends import Backend
from tests.support.helpers import steal_reservation, wait_until

HOOKED_KEY = "tests.jobs.HookedDebounced\0hooked"


@pytest.fixture(autouse=True)
def _hooks() -> Iterator[None]:
    jobs.KEY_HOOKS.clear()
    jobs.CALLBACK.clear()
    yield
    jobs.KEY_HOOKS.clear()
    jobs.CALLBACK.clear()


@pytest.fixture
def redislite(queue_name: str) -> Iterator[Queue]:
    queue = connections.build("redislite")
    try:
        yield queue
    finally:
        queue.clear(queue_name)  # type: ignore[attr-defined]
        queue.dispose()  # type: ignore[attr-defined]


@pytest.fixture
def sqlite(queue_name: str) -> Iterator[Queue]:
    queue = connections.build("sqlite")
    try:
        yield queue
    finally:
        queue.clear(queue_name)  # type: ignore[attr-defined]
        queue.dispose()  # type: ignore[attr-defined]


def _process(queue: Queue, queue_name: str, times: int = 1) -> list[JobReport]:
    reports: list[JobReport] = []
    worker = Worker(queue, recorder=None, reporter=reports.append)
    try:
        for _ in range(times):
            assert worker.process_next(10, [queue_name]) is True
    finally:
        worker.close()
    return reports


def _slot_is_free(queue: Queue, key: str) -> bool:
    store = slot_store_of(queue)
    slot = store.acquire(slot_key(queue.connection, key), 1, "f" * 32, 60)
    if slot is None:
        return False
    store.release(slot)
    return True


def _steal_once(backend: Backend, job_id: str) -> None:
    def steal(job: object) -> None:
        jobs.KEY_HOOKS.clear()
        steal_reservation(backend, job_id)

    jobs.KEY_HOOKS.append(steal)


def test_a_superseded_delivery_gives_its_slot_back(redislite: Queue, queue_name: str) -> None:
    """The older delivery takes the key's only slot, then is skipped: the newer one takes the slot at once."""
    holder = redislite.push(jobs.HookedDebounced("older"), queue=queue_name)
    assert redislite.push(jobs.HookedDebounced("newer"), queue=queue_name) == holder

    reports = _process(redislite, queue_name, 2)

    assert [(r.job_id, r.outcome) for r in reports] == [(holder, JobOutcome.SKIPPED), (holder, JobOutcome.SUCCEEDED)]
    assert [call[1] for call in jobs.CALLS if call[0] == "Unique"] == ["newer"]
    assert _slot_is_free(redislite, HOOKED_KEY)


def test_a_lock_store_that_fails_at_the_start_gives_the_slot_back_and_defers(
    redislite: Queue, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The slot was taken; releasing the "started" lock then fails (its table is gone for a moment): the delivery
    is given back for STORE_FAILURE_DELAY, not run, and its slot is free again."""
    job_id = redislite.push(jobs.HookedDebounced("a"), queue=queue_name)
    with db_connections["default"].cursor() as cursor:
        cursor.execute("ALTER TABLE kinetis_queue_unique_locks RENAME TO kinetis_queue_unique_locks_away")
    try:
        reports = _process(redislite, queue_name)
    finally:
        with db_connections["default"].cursor() as cursor:
            cursor.execute("ALTER TABLE kinetis_queue_unique_locks_away RENAME TO kinetis_queue_unique_locks")

    assert [(r.job_id, r.outcome, r.delay) for r in reports] == [(job_id, JobOutcome.DEFERRED, STORE_FAILURE_DELAY)]
    assert "the store of its concurrency slots or unique lock failed (OperationalError" in caplog.text
    assert jobs.CALLS == []
    assert _slot_is_free(redislite, HOOKED_KEY)


def test_a_superseded_delivery_whose_reservation_was_taken_is_a_lost_skip(
    redislite: Queue, queue_name: str, outcomes: list[tuple[str, dict[str, object]]]
) -> None:
    holder = redislite.push(jobs.HookedDebounced("older"), queue=queue_name)
    redislite.push(jobs.HookedDebounced("newer"), queue=queue_name)
    _steal_once(Backend("redis", "redislite"), holder)

    [report] = _process(redislite, queue_name)

    assert (report.job_id, report.outcome) == (holder, JobOutcome.LOST)
    assert [(name, kwargs["operation"]) for name, kwargs in outcomes] == [("job_settlement_lost", JobSettlement.ACK)]
    assert jobs.CALLS == []
    assert _slot_is_free(redislite, HOOKED_KEY)


def test_a_deferral_whose_reservation_was_taken_is_lost(
    redislite: Queue, queue_name: str, outcomes: list[tuple[str, dict[str, object]]]
) -> None:
    """The key's only slot is held elsewhere, so the delivery is to be given back; its reservation was taken
    meanwhile: the give-back is refused as stale, and the other delivery keeps the job."""
    store = slot_store_of(redislite)
    elsewhere = store.acquire(slot_key("redislite", HOOKED_KEY), 1, "e" * 32, 60)
    assert elsewhere is not None
    try:
        job_id = redislite.push(jobs.HookedDebounced("a"), queue=queue_name)
        _steal_once(Backend("redis", "redislite"), job_id)

        [report] = _process(redislite, queue_name)
    finally:
        store.release(elsewhere)

    assert (report.job_id, report.outcome) == (job_id, JobOutcome.LOST)
    assert [(name, kwargs["operation"]) for name, kwargs in outcomes] == [
        ("job_settlement_lost", JobSettlement.UNRESERVE)
    ]
    assert jobs.CALLS == []


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_concurrency_key_that_is_not_a_string_fails_the_job(sqlite: Queue, queue_name: str) -> None:
    job_id = sqlite.push(jobs.KeyNotAString(), queue=queue_name, max_attempts=1)

    [report] = _process(sqlite, queue_name)

    assert (report.job_id, report.outcome, report.error) == (job_id, JobOutcome.FAILED, "InvalidQueueArgumentError")


def test_limit_concurrency_decorates_job_classes_only() -> None:
    decorate = limit_concurrency(max=1)
    with pytest.raises(TypeError, match="@limit_concurrency decorates a Job subclass"):
        decorate(object)  # type: ignore[type-var]
    with pytest.raises(TypeError, match="@limit_concurrency decorates a Job subclass"):
        decorate(jobs.Noop())  # type: ignore[type-var]


@pytest.mark.parametrize(
    "lock",
    [{"key": "short", "until": "settled"}, {"key": "a" * 32, "until": "forever"}],
    ids=["key-of-the-wrong-length", "unknown-scope"],
)
def test_unreadable_lock_data_runs_the_job_as_one_that_is_not_unique(
    sqlite: Queue, queue_name: str, lock: dict[str, str]
) -> None:
    """A job whose metadata names its lock unreadably: the worker runs and acks it (the lock, if any, expires by
    itself), it never fails or defers it for that."""
    job_id = sqlite.push(jobs.Unique("odd"), queue=queue_name)
    with db_connections["default"].cursor() as cursor:
        cursor.execute(
            "UPDATE kinetis_queue_jobs SET metadata = %s WHERE job_id = %s", [json.dumps({METADATA_KEY: lock}), job_id]
        )

    [report] = _process(sqlite, queue_name)

    assert (report.job_id, report.outcome) == (job_id, JobOutcome.SUCCEEDED)
    assert [call[1] for call in jobs.CALLS if call[0] == "Unique"] == ["odd"]
    assert sqlite.size(queue_name) == 0


def test_a_slot_is_renewed_while_its_job_runs(sqlite: Queue, queue_name: str) -> None:
    """The sqlite connection's slots are leased for its visibility timeout (1 s): renewed while the job runs."""
    row = LimitSlot.objects.using("default").filter(slot_key=slot_key("sqlite", "tests.jobs.OneAtATime"), slot=0)
    renewed: list[bool] = []

    def runs_past_a_renewal(context: JobContext) -> None:
        first = row.get().expires_at
        renewed.append(wait_until(lambda: row.get().expires_at > first, 10))

    jobs.CALLBACK[:] = [runs_past_a_renewal]
    sqlite.push(jobs.OneAtATime(), queue=queue_name)

    [report] = _process(sqlite, queue_name)

    assert report.outcome is JobOutcome.SUCCEEDED
    assert renewed == [True]
    assert _slot_is_free(sqlite, "tests.jobs.OneAtATime")


def test_a_slot_that_cannot_be_renewed_or_given_back_is_logged_and_left_to_its_lease(
    sqlite: Queue, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The slots table is gone while the job runs: its renewal fails (logged, the job goes on), and so does its
    release after the attempt (logged: the lease frees it); the job itself succeeds."""

    def slots_table_gone(context: JobContext) -> None:
        with db_connections["default"].cursor() as cursor:
            cursor.execute("ALTER TABLE kinetis_queue_limit_slots RENAME TO kinetis_queue_limit_slots_away")
        wait_until(lambda: "A concurrency slot's renewal failed (OperationalError)" in caplog.text, 10)

    jobs.CALLBACK[:] = [slots_table_gone]
    job_id = sqlite.push(jobs.OneAtATime(), queue=queue_name)
    try:
        with caplog.at_level(logging.WARNING, logger="kinetis_queue.worker"):
            [report] = _process(sqlite, queue_name)
    finally:
        with db_connections["default"].cursor() as cursor:
            cursor.execute("ALTER TABLE kinetis_queue_limit_slots_away RENAME TO kinetis_queue_limit_slots")

    assert (report.job_id, report.outcome) == (job_id, JobOutcome.SUCCEEDED)
    assert "A concurrency slot could not be given back (OperationalError); it frees itself within 1s" in caplog.text
    wait_until(lambda: _slot_is_free(sqlite, "tests.jobs.OneAtATime"), 10)  # its lease ended


def test_a_renewal_round_slower_than_a_third_of_the_lease_is_logged(
    queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The slots' Redis answers slowly (the fault proxy's latency) while the job runs: the round says so."""
    parts = urlsplit(settings.REDIS_URL)
    with FaultProxy(parts.hostname or "127.0.0.1", parts.port or 6379) as proxy:
        url = urlunsplit(parts._replace(netloc=f"127.0.0.1:{proxy.port}"))
        queue = RedisQueue(url=url, prefix=settings.REDIS_PREFIX, visibility_timeout=1, connection="slowslots")

        def slow_store(context: JobContext) -> None:
            proxy.set(Latency(400))
            try:
                wait_until(lambda: "takes longer than a third of their lease" in caplog.text, 10)
            finally:
                proxy.set(Pass())

        jobs.CALLBACK[:] = [slow_store]
        queue.push(jobs.OneAtATime(), queue=queue_name)
        try:
            with caplog.at_level(logging.WARNING, logger="kinetis_queue.worker"):
                _process(queue, queue_name)
        finally:
            queue.clear(queue_name)
            queue.dispose()
    assert "Renewing 1 concurrency slots takes longer than a third of their lease" in caplog.text
    assert [call for call in jobs.CALLS if call[0] == "CallsBack"] == [("CallsBack", 1)]
