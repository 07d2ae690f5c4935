"""Pushing inside transactions (SQL's atomic push, push_on_commit) and the inline sync backend."""

from __future__ import annotations

import pytest
from django.db import transaction

from kinetis_queue import push_on_commit, queues
from kinetis_queue.exceptions import InvalidQueueArgumentError, UnserializableJobError
from tests import jobs
from tests.core.test_serializer import Carrier  # takes one argument of any shape
from tests.support.backends import SQL_BACKENDS, Backend

sql = pytest.mark.parametrize("backend", SQL_BACKENDS, ids=lambda b: b.id)


class _Rollback(Exception):
    pass


@sql
def test_a_push_inside_atomic_on_the_queue_database_rolls_back_with_it(backend: Backend, queue_name: str) -> None:
    """SQL README: Enqueueing inside your own transaction."""
    queue = queues[backend.connection]
    with pytest.raises(_Rollback):
        with transaction.atomic(using=backend.database):
            queue.push(jobs.Noop(), queue=queue_name)
            raise _Rollback
    assert queue.size(queue_name) == 0
    with transaction.atomic(using=backend.database):
        queue.push(jobs.Noop(), queue=queue_name)
        if backend.id != "sql-sqlite":  # SQLite's one writer lock would block the claim until commit
            # Not visible to a worker before the commit.
            assert queue.pop(0.1, [queue_name]) is None
    job = queue.pop(5, [queue_name])
    assert job is not None
    queue.ack(job)


@sql
def test_push_on_commit_pushes_only_after_commit(backend: Backend, queue_name: str) -> None:
    queue = queues[backend.connection]
    with pytest.raises(_Rollback):
        with transaction.atomic(using=backend.database):
            push_on_commit(jobs.Noop(), queue=queue_name, using=backend.database, connection=backend.connection)
            raise _Rollback
    assert queue.size(queue_name) == 0
    with transaction.atomic(using=backend.database):
        job_id = push_on_commit(jobs.Noop(), queue=queue_name, using=backend.database, connection=backend.connection)
    job = queue.pop(5, [queue_name])
    assert job is not None and job.id == job_id
    queue.ack(job)


def test_push_on_commit_validates_at_the_call_site(queue_name: str) -> None:
    with transaction.atomic():
        with pytest.raises(InvalidQueueArgumentError):
            push_on_commit(jobs.Noop(), queue="bad name")
        with pytest.raises(UnserializableJobError):
            push_on_commit(Carrier((1, 2)), queue=queue_name)
    assert queues.default().size(queue_name) == 0


def test_push_on_commit_reaches_any_backend_outside_a_transaction() -> None:
    push_on_commit(jobs.Records("inline"), connection="sync")
    assert [c[1] for c in jobs.CALLS] == ["inline"]


def test_the_sync_queue_runs_the_rebuilt_job_inline_and_propagates_its_exception() -> None:
    sync = queues["sync"]
    sync.push(jobs.Records("x", [1]), queue="reports", max_attempts=3)
    assert jobs.CALLS == [("Records", "x", [1], None, None, 1, "reports")]
    with pytest.raises(RuntimeError, match="deliberate failure"):
        sync.push(jobs.Fails())


@pytest.mark.parametrize("kwargs", [{"delay": -1}, {"queue": "a.b"}, {"max_attempts": -1}])
def test_the_sync_queue_validates_exactly_like_the_others(kwargs: dict[str, object]) -> None:
    with pytest.raises(InvalidQueueArgumentError):
        queues["sync"].push(jobs.Records("never"), **kwargs)  # type: ignore[arg-type]
    assert jobs.CALLS == []


def test_push_on_commit_pushes_the_arguments_as_they_were_at_the_call() -> None:
    items = [1, 2]
    with transaction.atomic():
        push_on_commit(jobs.Records("x", items), connection="sync")
        items.append(3)
    assert jobs.CALLS[0][2] == [1, 2]


#: A connection whose store nothing listens for: every push to it fails (ConnectionFailedError).
DEAD_STORE = {"BACKEND": "redis", "URL": "redis://127.0.0.1:9/0"}


def test_a_failing_push_on_commit_keeps_the_later_hooks_and_is_reported(
    queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 12 item 8: a push that fails in its commit hook neither stops the application's own later
    hooks nor goes unnoticed: it is logged and sent as signals.push_on_commit_failed."""
    from django.conf import settings
    from django.test import override_settings

    from kinetis_queue import signals

    reported: list[dict[str, object]] = []

    def receiver(sender: object, **kwargs: object) -> None:
        reported.append(kwargs)

    signals.push_on_commit_failed.connect(receiver)
    ran: list[str] = []
    setting = {**settings.KINETIS_QUEUE, "CONNECTIONS": {**settings.KINETIS_QUEUE["CONNECTIONS"], "dead": DEAD_STORE}}
    try:
        with override_settings(KINETIS_QUEUE=setting), caplog.at_level("ERROR", logger="kinetis_queue"):
            with transaction.atomic():
                job_id = push_on_commit(
                    jobs.Fails("label", token="SECRET-TOKEN-VALUE"), queue=queue_name, connection="dead"
                )
                push_on_commit(jobs.Noop(), queue=queue_name, connection="sqlite")
                transaction.on_commit(lambda: ran.append("application hook"))
    finally:
        signals.push_on_commit_failed.disconnect(receiver)
    assert ran == ["application hook"]
    # The hook after the failing push ran too: its job is stored.
    job = queues["sqlite"].pop(5, [queue_name])
    assert job is not None and job.job_class == "tests.jobs.Noop"
    queues["sqlite"].ack(job)
    assert len(reported) == 1
    assert reported[0]["job_id"] == job_id and reported[0]["queue"] == queue_name
    assert reported[0]["connection"] == "dead" and reported[0]["job_class"] == "tests.jobs.Fails"
    assert type(reported[0]["exception"]).__name__ == "ConnectionFailedError"
    failures = [r for r in caplog.records if r.name == "kinetis_queue.dispatch"]
    assert len(failures) == 1 and job_id in failures[0].getMessage()
    assert "ConnectionFailedError" in failures[0].getMessage()
    assert "SECRET-TOKEN-VALUE" not in caplog.text


def test_push_on_commit_outside_a_transaction_raises_at_the_call(queue_name: str) -> None:
    from django.conf import settings
    from django.test import override_settings

    from kinetis_queue.exceptions import ConnectionFailedError

    setting = {**settings.KINETIS_QUEUE, "CONNECTIONS": {**settings.KINETIS_QUEUE["CONNECTIONS"], "dead": DEAD_STORE}}
    with override_settings(KINETIS_QUEUE=setting), pytest.raises(ConnectionFailedError):
        push_on_commit(jobs.Noop(), queue=queue_name, connection="dead")
