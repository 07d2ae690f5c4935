"""cancel(job_id) on every backend that stores jobs (kinetis_queue.control, docs/cancel-and-pause.md).

A pending job never runs: the SQL backend removes it at once, the others record the cancellation and
the worker that pops the job skips it (acked unrun). A running job sees ``context.cancelled`` become
true and can stop. After the job finished, SQL answers False and records nothing; the stores that
cannot look a job up by id answer True, and the cancellation recorded changes nothing.
"""

from __future__ import annotations

import threading
import uuid

import pytest
from django.db import connections as db_connections
from django.test.utils import CaptureQueriesContext

from kinetis_queue import cancel
from kinetis_queue.contracts import Queue, Withdrawal
from kinetis_queue.control import cancel_job, cancel_many
from kinetis_queue.exceptions import InvalidQueueArgumentError, QueueConfigurationError
from kinetis_queue.job import JobContext
from kinetis_queue.models import Cancellation
from kinetis_queue.worker import JobOutcome, JobReport, Worker
from tests import jobs
from tests.support.backends import Backend
from tests.support.helpers import wait_until

pytestmark = pytest.mark.trait("stores_jobs")


def _recorded(backend: Backend, job_id: str) -> bool:
    return Cancellation.objects.filter(connection=backend.connection, job_id=job_id).exists()


def test_a_pending_job_never_runs(connection: Queue, backend: Backend, queue_name: str) -> None:
    cancelled = connection.push(jobs.Records("cancelled"), queue=queue_name)
    kept = connection.push(jobs.Records("kept"), queue=queue_name)

    found = cancel_job(cancelled, backend.connection)

    sql = backend.database is not None
    assert found is (Withdrawal.REMOVED if sql else Withdrawal.UNKNOWN)
    assert _recorded(backend, cancelled) is not sql  # SQL removed it: nothing to record
    reports: list[JobReport] = []
    worker = Worker(connection, recorder=None, reporter=reports.append)
    try:
        worker.run(0.3, [queue_name], stop_when_empty=True)
    finally:
        worker.close()
    assert [call[1] for call in jobs.CALLS] == ["kept"]
    outcomes = {report.job_id: report.outcome for report in reports}
    if sql:
        assert outcomes == {kept: JobOutcome.SUCCEEDED}  # never delivered
    else:
        assert outcomes == {cancelled: JobOutcome.SKIPPED, kept: JobOutcome.SUCCEEDED}  # popped, acked unrun
    assert connection.size(queue_name) == 0


def test_a_running_job_sees_cancelled_and_stops(connection: Queue, backend: Backend, queue_name: str) -> None:
    job_id = connection.push(jobs.LoopsUntilCancelled(limit=30), queue=queue_name)
    reports: list[JobReport] = []
    worker = Worker(connection, recorder=None, reporter=reports.append)
    runner = threading.Thread(target=worker.process_next, args=(5, [queue_name]))
    runner.start()
    try:
        wait_until(lambda: ("LoopsUntilCancelled", "started", job_id) in jobs.CALLS)
        found = cancel_job(job_id, backend.connection)
        assert found is (Withdrawal.HELD if backend.database is not None else Withdrawal.UNKNOWN)
        assert _recorded(backend, job_id)
        wait_until(lambda: ("LoopsUntilCancelled", "cancelled", job_id) in jobs.CALLS, timeout=15)
        runner.join(15)
    finally:
        runner.join(30)
        worker.close()
    assert [(r.job_id, r.outcome) for r in reports] == [(job_id, JobOutcome.SUCCEEDED)]  # it chose to return
    assert ("LoopsUntilCancelled", "ran out", job_id) not in jobs.CALLS
    assert connection.size(queue_name) == 0


def test_a_cancelled_running_job_that_fails_is_not_retried(
    connection: Queue, backend: Backend, queue_name: str
) -> None:
    """The retry its failure releases is the same job id: the worker that meets it skips it."""

    def fail_once_cancelled(context: JobContext) -> None:
        wait_until(lambda: context.cancelled, timeout=15)
        raise RuntimeError("stopped: cancelled")

    jobs.CALLBACK[:] = [fail_once_cancelled]
    job_id = connection.push(jobs.CallsBack(), queue=queue_name, max_attempts=3)
    reports: list[JobReport] = []
    worker = Worker(connection, recorder=None, reporter=reports.append, retry_base_delay=0)
    runner = threading.Thread(target=worker.process_next, args=(5, [queue_name]))
    runner.start()
    try:
        wait_until(lambda: connection.size(queue_name) == 0)  # reserved: the job runs
        assert cancel(job_id, backend.connection) is True
        runner.join(20)
        assert [r.outcome for r in reports] == [JobOutcome.RELEASED]
        wait_until(lambda: worker.process_next(1, [queue_name]))
    finally:
        runner.join(30)
        worker.close()
        jobs.CALLBACK.clear()
    assert [(r.job_id, r.outcome) for r in reports] == [(job_id, JobOutcome.RELEASED), (job_id, JobOutcome.SKIPPED)]
    assert jobs.CALLS == []  # CallsBack records only after its callback returned
    assert connection.size(queue_name) == 0


def test_cancel_after_the_job_finished(connection: Queue, backend: Backend, queue_name: str) -> None:
    """SQL looks the job up and says False (nothing recorded); the others cannot tell and say True, harmlessly."""
    job_id = connection.push(jobs.Records("done"), queue=queue_name)
    worker = Worker(connection, recorder=None)
    try:
        assert worker.process_next(5, [queue_name]) is True
        sql = backend.database is not None
        assert cancel(job_id, backend.connection) is not sql
        assert _recorded(backend, job_id) is not sql
        # Nothing else is touched: the next job of the queue runs as ever.
        connection.push(jobs.Records("next"), queue=queue_name)
        assert wait_until(lambda: worker.process_next(1, [queue_name]))
    finally:
        worker.close()
    assert [call[1] for call in jobs.CALLS] == ["done", "next"]


def test_a_second_cancel_is_harmless(connection: Queue, backend: Backend, queue_name: str) -> None:
    job_id = connection.push(jobs.Records("twice"), queue=queue_name, delay=600)  # a delayed job is pending too
    first = cancel_job(job_id, backend.connection)
    second = cancel_job(job_id, backend.connection)
    if backend.database is not None:
        assert (first, second) == (Withdrawal.REMOVED, Withdrawal.ABSENT)
    else:
        assert (first, second) == (Withdrawal.UNKNOWN, Withdrawal.UNKNOWN)
        assert Cancellation.objects.filter(connection=backend.connection, job_id=job_id).count() == 1


@pytest.mark.parametrize("job_class", [jobs.Unique, jobs.UniqueUntilStarted], ids=["until-settled", "until-started"])
def test_a_cancelled_unique_job_frees_its_key(
    connection: Queue, backend: Backend, queue_name: str, job_class: type[jobs.Unique]
) -> None:
    """It will never start nor settle: its key is freed when it is removed or skipped, not at unique_for's end."""
    first = connection.push(job_class(queue_name), queue=queue_name)
    assert connection.push(job_class(queue_name), queue=queue_name) == first  # the key is held
    assert cancel(first, backend.connection) is True
    worker = Worker(connection, recorder=None)
    try:
        worker.run(0.3, [queue_name], stop_when_empty=True)
        second = connection.push(job_class(queue_name), queue=queue_name)
        assert second != first
        worker.run(0.3, [queue_name], stop_when_empty=True)
    finally:
        worker.close()
    assert jobs.CALLS == [("Unique", queue_name, second)]


@pytest.mark.parametrize(
    "job_id",
    ["", "abc", "A" * 32, "g" * 32, "0" * 31, "0" * 33, " " + "0" * 31, 12345, None, b"0" * 32],
    ids=repr,
)
def test_a_bad_job_id_is_refused_before_any_io(job_id: object) -> None:
    before = Cancellation.objects.count()
    with CaptureQueriesContext(db_connections["default"]) as queries:
        with pytest.raises(InvalidQueueArgumentError, match=r"job id .* is invalid: a job id is 32 lowercase hex"):
            cancel(job_id, connection="nosuch")  # type: ignore[arg-type]  # the id is checked first
    assert len(queries) == 0
    assert Cancellation.objects.count() == before


def test_a_bad_or_unknown_connection_is_refused_before_any_io() -> None:
    job_id = uuid.uuid4().hex
    with CaptureQueriesContext(db_connections["default"]) as queries:
        with pytest.raises(InvalidQueueArgumentError, match=r"connection 'Bad!' is invalid"):
            cancel(job_id, connection="Bad!")
        with pytest.raises(QueueConfigurationError, match=r"'nosuch'.* is not configured"):
            cancel(job_id, connection="nosuch")
    assert len(queries) == 0


def test_the_sync_backend_holds_nothing_to_cancel() -> None:
    job_id = uuid.uuid4().hex
    assert cancel(job_id, connection="sync") is False
    assert not Cancellation.objects.filter(job_id=job_id).exists()


def test_a_cancellation_committed_late_is_still_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows are read by primary key, but a key is taken before its transaction commits: a row whose key is
    below one already read (a late commit) is still seen for LATE_COMMIT seconds."""
    from kinetis_queue.control import hooks

    connection = "c" + uuid.uuid4().hex[:12]  # a view of its own (nothing else reads this connection)
    view = hooks.ControlView(connection)
    first = Cancellation.objects.create(connection=connection, job_id=uuid.uuid4().hex)
    view.refresh()
    late = Cancellation.objects.create(connection=connection, job_id=uuid.uuid4().hex)
    after = Cancellation.objects.create(connection=connection, job_id=uuid.uuid4().hex)
    late_pk, late_id = late.pk, late.job_id
    late.delete()  # its transaction has not committed yet...
    view.refresh()
    assert view.cancelled == {first.job_id, after.job_id}
    Cancellation.objects.create(pk=late_pk, connection=connection, job_id=late_id)  # ...now it has
    view.refresh()
    assert late_id in view.cancelled

    # The negative control: with no look-back, the late row's key is below the floor and never read.
    blind = hooks.ControlView(connection)
    monkeypatch.setattr(hooks, "LATE_COMMIT", 0.0)
    Cancellation.objects.filter(pk=late_pk).delete()
    blind.refresh()
    blind.refresh()
    Cancellation.objects.create(pk=late_pk, connection=connection, job_id=late_id)
    blind.refresh()
    assert late_id not in blind.cancelled and after.job_id in blind.cancelled


def test_cancel_many_answers_per_job_as_cancel_job_does(connection: Queue, backend: Backend, queue_name: str) -> None:
    """``cancel_many()`` (a workflow's cancel): what was found per id, the held and unknown ones recorded."""
    waiting = connection.push(jobs.Records("waiting"), queue=queue_name)
    held_id = connection.push(jobs.Records("held"), queue=queue_name, priority=1 if backend.orders_by_priority else 0)
    held = connection.pop(10, [queue_name])
    assert held is not None
    if held.id == waiting:  # a store without priorities delivered in push order
        waiting, held_id = held_id, waiting
    absent = uuid.uuid4().hex

    found = cancel_many([waiting, held.id, absent, waiting], backend.connection)

    if backend.database is not None:
        assert found == {waiting: Withdrawal.REMOVED, held.id: Withdrawal.HELD, absent: Withdrawal.ABSENT}
        assert connection.size(queue_name) == 0
    else:
        assert found == dict.fromkeys([waiting, held.id, absent], Withdrawal.UNKNOWN)
    assert [job_id for job_id in (waiting, held.id, absent) if _recorded(backend, job_id)] == [
        job_id for job_id, what in found.items() if what in (Withdrawal.HELD, Withdrawal.UNKNOWN)
    ]
    connection.ack(held)
    with pytest.raises(InvalidQueueArgumentError):
        cancel_many(["not-a-job-id"], backend.connection)
