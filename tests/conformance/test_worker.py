"""The worker lifecycle on every backend that stores jobs (contract: "Worker lifecycle")."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.db import connections as db_connections
from django.db import transaction
from django.utils import timezone, translation

from kinetis_queue import Job, JobContext, signals
from kinetis_queue.contracts import JobSettlement, Queue, RenewableQueue
from kinetis_queue.exceptions import JobReconstructionError, UnresolvableJobParameterError
from kinetis_queue.models import FailedJob
from kinetis_queue.worker import Worker, retry_delay
from tests import jobs
from tests.support.backends import Backend
from tests.support.concurrent_worker import use_concurrency
from tests.support.helpers import steal_reservation

pytestmark = pytest.mark.trait("stores_jobs")


@pytest.fixture(autouse=True, params=[1, 8], ids=["c1", "c8"])
def concurrency(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Every test at concurrency 1 and 8 (tests/support/concurrent_worker.py)."""
    return use_concurrency(request, monkeypatch)


def names(outcomes: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [name for name, _ in outcomes]


def test_a_job_that_returns_is_acked_and_reported_once(connection: Queue, queue_name: str, outcomes: list) -> None:
    """Contract: One transition per delivery."""
    job_id = connection.push(jobs.Records("hello", [1, 2]), queue=queue_name)
    worker = Worker(connection, retry_base_delay=0)
    try:
        assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()
    assert jobs.CALLS == [("Records", "hello", [1, 2], None, None, 1, queue_name)]
    assert names(outcomes) == ["job_succeeded"]
    assert outcomes[0][1]["job"].id == job_id
    assert connection.size(queue_name) == 0
    assert connection.pop(0.1, [queue_name]) is None


def test_empty_pop_processes_nothing(connection: Queue, queue_name: str, outcomes: list) -> None:
    worker = Worker(connection)
    assert worker.process_next(0.1, [queue_name]) is False
    assert outcomes == []


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_failing_job_is_retried_up_to_its_cap_then_recorded_and_failed(
    connection: Queue, queue_name: str, outcomes: list
) -> None:
    """Contract: One transition per delivery; Recording a job before fail()."""
    job_id = connection.push(jobs.Fails("x"), queue=queue_name, max_attempts=3)
    worker = Worker(connection, retry_base_delay=0)
    try:
        for _ in range(3):
            assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()
    assert [c[2] for c in jobs.CALLS] == [1, 2, 3]
    assert names(outcomes) == ["job_released", "job_released", "job_failed_permanently"]
    assert [kw["delay"] for _, kw in outcomes[:2]] == [0, 0]
    record = FailedJob.objects.get(job_id=job_id)
    assert outcomes[2][1]["failed_job_id"] == record.pk
    assert (record.queue, record.attempts, record.max_attempts) == (queue_name, 3, 3)
    assert record.exception_class == "builtins.RuntimeError"
    assert record.job_class == "tests.jobs.Fails"
    assert connection.size(queue_name) == 0
    assert connection.pop(0.1, [queue_name]) is None


@pytest.mark.parametrize("cap", [0, 1])
@pytest.mark.logs_errors("kinetis_queue.worker")
def test_with_a_cap_of_0_or_1_a_failing_job_is_never_retried(
    connection: Queue, queue_name: str, outcomes: list, cap: int
) -> None:
    connection.push(jobs.Fails(), queue=queue_name, max_attempts=cap)
    worker = Worker(connection, default_max_attempts=5, retry_base_delay=0)
    worker.process_next(5, [queue_name])
    worker.close()
    assert names(outcomes) == ["job_failed_permanently"]
    assert connection.size(queue_name) == 0


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_the_worker_default_cap_applies_when_the_job_has_none(
    connection: Queue, queue_name: str, outcomes: list
) -> None:
    connection.push(jobs.Fails(), queue=queue_name)
    worker = Worker(connection, default_max_attempts=2, retry_base_delay=0)
    worker.process_next(5, [queue_name])
    worker.process_next(5, [queue_name])
    worker.close()
    assert names(outcomes) == ["job_released", "job_failed_permanently"]


@pytest.mark.trait("counts_delayed_release")
def test_a_retry_waits_out_the_computed_delay(connection: Queue, queue_name: str, outcomes: list) -> None:
    """Contract: delay(attempt) = min(900, base * 2 ** min(attempt - 1, 10))."""
    connection.push(jobs.FailsOnce("x"), queue=queue_name, max_attempts=2)
    worker = Worker(connection, retry_base_delay=1)
    worker.process_next(5, [queue_name])
    assert outcomes[-1][1]["delay"] == 1
    assert connection.pop(0.2, [queue_name]) is None  # still inside its retry delay
    assert connection.size(queue_name) == 1
    assert worker.process_next(10, [queue_name]) is True
    worker.close()
    assert names(outcomes) == ["job_released", "job_succeeded"]
    assert jobs.CALLS == [("FailsOnce", "x", 1), ("FailsOnce", "x", 2)]


def test_retry_delay_formula() -> None:
    assert [retry_delay(a, 5) for a in (1, 2, 3, 4)] == [5, 10, 20, 40]
    assert retry_delay(8, 5) == 640
    assert retry_delay(9, 5) == 900
    assert retry_delay(10_000, 5) == 900
    assert retry_delay(3, 0) == 0


@pytest.mark.trait("recovers_by_timeout")
@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_recorder_error_propagates_and_settles_nothing(connection: Queue, queue_name: str, outcomes: list) -> None:
    """Contract: an exception from record() propagates and nothing is settled."""

    class Broken:
        def record(self, *args: Any) -> None:
            raise OSError("failed-job store is down")

    job_id = connection.push(jobs.Fails(), queue=queue_name, max_attempts=1)
    worker = Worker(connection, recorder=Broken())
    with pytest.raises(OSError, match="store is down"):
        worker.process_next(5, [queue_name])
    worker.close()
    assert outcomes == []
    # The backend still holds the delivery: it comes back once the reservation expires.
    again = connection.pop(10, [queue_name])
    assert again is not None and again.id == job_id and again.attempts == 2
    connection.ack(again)


@pytest.mark.trait("fenced")
@pytest.mark.parametrize("fails", [False, True], ids=["ack", "fail"])
@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_stale_settlement_is_reported_as_lost_and_the_loop_goes_on(
    connection: Queue, queue_name: str, outcomes: list, backend: Backend, fails: bool
) -> None:
    """Contract: When the backend answers with StaleJobHandleException."""
    job_id = connection.push(jobs.CallsBack(), queue=queue_name, max_attempts=1)

    def steal(context: JobContext) -> None:
        steal_reservation(backend, context.id)
        if fails:
            raise RuntimeError("job failed after losing its reservation")

    jobs.CALLBACK[:] = [steal]
    worker = Worker(connection, recorder=None)
    assert worker.process_next(5, [queue_name]) is True
    worker.close()
    assert names(outcomes) == ["job_settlement_lost"]
    lost = outcomes[0][1]
    assert lost["operation"] is (JobSettlement.FAIL if fails else JobSettlement.ACK)
    assert lost["job"].id == job_id
    assert (lost["exception"] is not None) is fails


@pytest.mark.logs_errors("django.dispatch", "kinetis_queue.worker")
def test_a_raising_receiver_never_changes_the_outcome(connection: Queue, queue_name: str, outcomes: list) -> None:
    """Contract: Observers never decide or rewrite the outcome."""

    def explode(**kwargs: Any) -> None:
        raise RuntimeError("receiver bug")

    signals.job_succeeded.connect(explode, weak=False)
    try:
        connection.push(jobs.Noop(), queue=queue_name)
        worker = Worker(connection)
        assert worker.process_next(5, [queue_name]) is True
        worker.close()
    finally:
        signals.job_succeeded.disconnect(explode)
    assert names(outcomes) == ["job_succeeded"]
    assert connection.size(queue_name) == 0
    assert connection.pop(0.1, [queue_name]) is None


class BadHandle(Job):
    """A handle() the worker cannot call; here, not in tests/jobs.py, whose classes check E005 inspects."""

    def handle(self, count: int) -> None:  # type: ignore[override]
        pass


@pytest.mark.parametrize(
    ("job_class", "args", "error"),
    [
        ("tests.jobs.NoSuchJob", {}, JobReconstructionError),
        ("os.system", {}, JobReconstructionError),
        ("tests.jobs.Records", {"label": "x", "unknown": 1}, JobReconstructionError),
        ("tests.jobs.Records", {}, JobReconstructionError),
        (f"{__name__}.BadHandle", {}, UnresolvableJobParameterError),
    ],
    ids=["unknown-class", "not-a-job", "unknown-argument", "missing-argument", "scalar-handle-parameter"],
)
@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_job_that_cannot_be_rebuilt_or_called_is_the_jobs_own_failure(
    connection: Queue, queue_name: str, outcomes: list, backend: Backend, job_class: str, args: dict, error: type
) -> None:
    """Contract: JobReconstructionError / UnresolvableJobParameterError are handled as the job's failure."""
    job_id = connection.push(jobs.Noop(), queue=queue_name, max_attempts=1)
    _rewrite_stored_job(backend, job_id, job_class, args)
    worker = Worker(connection)
    assert worker.process_next(5, [queue_name]) is True
    worker.close()
    assert names(outcomes) == ["job_failed_permanently"]
    assert isinstance(outcomes[0][1]["exception"], error)
    assert FailedJob.objects.get(job_id=job_id).exception_class.endswith(error.__name__)


def _rewrite_stored_job(backend: Backend, job_id: str, job_class: str, args: dict[str, Any]) -> None:
    import json

    if backend.id in ("redis", "redis-cluster"):
        from tests.support.helpers import find_redis_member, redis_client

        key, member = find_redis_member(backend, job_id, "pending")
        stored = {**json.loads(member), "class": job_class, "args": args}
        with redis_client(backend) as client:
            client.lset(key, client.lpos(key, member), json.dumps(stored, separators=(",", ":")))
        return
    if backend.database is None:
        from tests.support.helpers import rewrite_stored_job  # through the backend's setup fixture (Backend.setup)

        rewrite_stored_job(backend, job_id, job_class, args)
        return
    with db_connections[backend.database].cursor() as cursor:
        cursor.execute(
            "UPDATE kinetis_queue_jobs SET job_class = %s, args = %s WHERE job_id = %s",
            [job_class, json.dumps(args), job_id],
        )


def test_a_final_failure_is_logged_with_sensitive_arguments_redacted(
    connection: Queue, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Contract: a final failure is logged with the job's arguments, redacted per Sensitive."""
    connection.push(jobs.Fails("visible-label", token="s3cr3t-TOKEN-value"), queue=queue_name, max_attempts=1)
    worker = Worker(connection)
    with caplog.at_level(logging.INFO, logger="kinetis_queue"):
        worker.process_next(5, [queue_name])
    worker.close()
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "s3cr3t-TOKEN-value" not in text
    assert "[redacted]" in text
    assert "visible-label" in text
    failure = next(r for r in caplog.records if "failed permanently" in r.getMessage())
    assert failure.job_class == "tests.jobs.Fails"  # type: ignore[attr-defined]
    assert failure.queue == queue_name  # type: ignore[attr-defined]
    assert failure.attempt == 1  # type: ignore[attr-defined]


def test_a_retry_log_line_carries_no_arguments(
    connection: Queue, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    connection.push(jobs.Fails("visible-label", token="s3cr3t-TOKEN-value"), queue=queue_name, max_attempts=2)
    worker = Worker(connection, retry_base_delay=0)
    with caplog.at_level(logging.INFO, logger="kinetis_queue"):
        worker.process_next(5, [queue_name])
    worker.close()
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "retrying in 0s" in text
    assert "s3cr3t-TOKEN-value" not in text and "visible-label" not in text


@pytest.mark.requires.with_args(RenewableQueue)
def test_the_heartbeat_keeps_a_long_job_reserved(connection: Queue, queue_name: str, outcomes: list) -> None:
    """Contract: Reservation renewal. The job outlives the 1 s visibility timeout several times."""
    connection.push(jobs.CallsBack(), queue=queue_name)
    seen: list[object] = []

    def meanwhile(context: JobContext) -> None:
        # A second poller looks for 2.5 s (2.5 visibility timeouts) while the job runs: the
        # heartbeat must keep the reservation alive, so it finds nothing.
        seen.append(_probe_pop(connection, queue_name))

    jobs.CALLBACK[:] = [meanwhile]
    worker = Worker(connection)
    worker.process_next(5, [queue_name])
    worker.close()
    assert seen == [None]
    assert names(outcomes) == ["job_succeeded"]
    assert connection.size(queue_name) == 0


def _probe_pop(connection: Queue, queue_name: str) -> object:
    import threading

    result: list[object] = []
    # Another thread has its own database connection, as another worker would.
    thread = threading.Thread(target=lambda: result.append(connection.pop(2.5, [queue_name])))
    thread.start()
    thread.join()
    return result[0]


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_job_leaves_no_transaction_or_translation_behind(connection: Queue, queue_name: str, outcomes: list) -> None:
    """Per-job hygiene: nothing from one job leaks into the next."""
    states: list[tuple[bool, str | None, str]] = []

    def leaky(context: JobContext) -> None:
        states.append(
            (
                db_connections["default"].in_atomic_block,
                translation.get_language(),
                timezone.get_current_timezone_name(),
            )
        )
        transaction.atomic(using="default").__enter__()
        translation.activate("fr")
        timezone.activate("Asia/Tokyo")

    jobs.CALLBACK[:] = [leaky]
    connection.push(jobs.CallsBack(), queue=queue_name)
    connection.push(jobs.CallsBack(), queue=queue_name)
    worker = Worker(connection)
    before = (False, translation.get_language(), timezone.get_current_timezone_name())
    worker.process_next(5, [queue_name])
    worker.process_next(5, [queue_name])
    worker.close()
    assert states == [before, before]
    assert (translation.get_language(), timezone.get_current_timezone_name()) == before[1:]
    assert db_connections["default"].in_atomic_block is False
    assert names(outcomes) == ["job_succeeded", "job_succeeded"]


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_final_failure_inside_a_transaction_the_job_left_open_is_still_recorded(
    connection: Queue, queue_name: str, outcomes: list
) -> None:
    """The job's open transaction is rolled back before settling, not after: the record survives it."""

    def fails_inside_a_transaction(context: JobContext) -> None:
        transaction.atomic(using="default").__enter__()
        raise RuntimeError("failed with a transaction open")

    jobs.CALLBACK[:] = [fails_inside_a_transaction]
    job_id = connection.push(jobs.CallsBack(), queue=queue_name, max_attempts=1)
    worker = Worker(connection)
    assert worker.process_next(5, [queue_name])
    worker.close()
    assert db_connections["default"].in_atomic_block is False
    assert names(outcomes) == ["job_failed_permanently"]
    assert FailedJob.objects.filter(job_id=job_id).count() == 1
    assert connection.size(queue_name) == 0
