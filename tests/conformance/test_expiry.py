"""Job expiry on every storing backend (kinetis_queue.expiry, docs/expiry.md): a job not started by its expiry is
settled without running (JobOutcome.EXPIRED, signals.job_expired, a failed-job record only when RECORD_EXPIRED
asks), its unique key freed; a bad expiry is refused at push, naming the option."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from kinetis_queue import signals
from kinetis_queue.contracts import Queue
from kinetis_queue.exceptions import InvalidQueueArgumentError
from kinetis_queue.expiry import METADATA_KEY
from kinetis_queue.models import FailedJob
from kinetis_queue.outcomes import JobOutcome
from tests import jobs
from tests.support.helpers import process_deliveries, wait_until

pytestmark = pytest.mark.trait("stores_jobs")


@pytest.fixture(autouse=True)
def _calls() -> None:
    jobs.CALLS.clear()


@pytest.fixture
def expired_signals() -> Iterator[list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        sent.append(kwargs)

    signals.job_expired.connect(receiver)
    yield sent
    signals.job_expired.disconnect(receiver)


def _past(connection: Queue, queue_name: str, job_id: str) -> None:
    """Wait until the job's expiry, as stored in its envelope, is behind this process's clock."""
    job = connection.pop(10, [queue_name])
    assert job is not None and job.id == job_id
    at = job.metadata[METADATA_KEY]
    connection.unreserve(job, 0)  # given back unstarted, as it was
    wait_until(lambda: time.time() > at, 10)


def test_a_job_not_started_by_its_expiry_never_runs(
    connection: Queue, queue_name: str, expired_signals: list[dict[str, Any]]
) -> None:
    expiring = connection.push(jobs.Records("late"), queue=queue_name, expires=0.3)
    _past(connection, queue_name, expiring)
    kept = connection.push(jobs.Records("on time"), queue=queue_name, expires=3600)

    reports = process_deliveries(connection, queue_name, 2)

    assert [(r.job_id, r.outcome) for r in reports] == [(expiring, JobOutcome.EXPIRED), (kept, JobOutcome.SUCCEEDED)]
    assert [call[1] for call in jobs.CALLS] == ["on time"]
    assert [sent["job"].id for sent in expired_signals] == [expiring]
    assert connection.size(queue_name) == 0
    assert not FailedJob.objects.filter(job_id=expiring).exists()


def test_record_expired_leaves_a_failed_job_record(connection: Queue, queue_name: str) -> None:
    with override_settings(KINETIS_QUEUE={**settings.KINETIS_QUEUE, "RECORD_EXPIRED": True}):
        expiring = connection.push(jobs.Records("late"), queue=queue_name, expires=0.3)
        _past(connection, queue_name, expiring)
        reports = process_deliveries(connection, queue_name, 1)
    assert [r.outcome for r in reports] == [JobOutcome.EXPIRED]
    record = FailedJob.objects.get(job_id=expiring)
    assert record.exception_class == "kinetis_queue.exceptions.JobExpiredError"
    record.delete()


def test_a_class_expiry_and_an_aware_datetime(connection: Queue, queue_name: str) -> None:
    by_class = connection.push(jobs.ExpiresSoon(), queue=queue_name)
    _past(connection, queue_name, by_class)
    moment = datetime.now(UTC) + timedelta(hours=1)
    by_moment = connection.push(jobs.Records("kept"), queue=queue_name, expires=moment)

    reports = process_deliveries(connection, queue_name, 2)

    assert [(r.job_id, r.outcome) for r in reports] == [
        (by_class, JobOutcome.EXPIRED),
        (by_moment, JobOutcome.SUCCEEDED),
    ]
    assert [call[1] for call in jobs.CALLS] == ["kept"]


def test_push_many_carries_the_expiry_of_every_job(connection: Queue, queue_name: str) -> None:
    ids = connection.push_many([jobs.Noop(), jobs.Noop()], queue=queue_name, expires=600)
    popped = [connection.pop(10, [queue_name]) for _ in ids]
    assert sorted(job.id for job in popped if job is not None) == sorted(ids)
    for job in popped:
        assert job is not None and time.time() + 590 < job.metadata[METADATA_KEY] <= time.time() + 600
        connection.ack(job)


def test_an_expired_unique_job_frees_its_key(connection: Queue, queue_name: str) -> None:
    first = connection.push(jobs.Noop(), queue=queue_name, expires=0.3, unique_key="k", unique_for=600)
    _past(connection, queue_name, first)
    assert [r.outcome for r in process_deliveries(connection, queue_name, 1)] == [JobOutcome.EXPIRED]
    second = connection.push(jobs.Noop(), queue=queue_name, unique_key="k", unique_for=600)
    assert second != first  # the key was free again: a new job
    assert [r.outcome for r in process_deliveries(connection, queue_name, 1)] == [JobOutcome.SUCCEEDED]


@pytest.mark.parametrize(
    ("expires", "message"),
    [
        (0, "expires must be a number of seconds above 0"),
        (-1, "expires must be a number of seconds above 0"),
        ("soon", "expires must be a number of seconds above 0"),
        (float("nan"), "expires must be a number of seconds above 0"),
        (datetime(2030, 1, 1), "expires must be an aware datetime"),
        (datetime(2000, 1, 1, tzinfo=UTC), "expires comes before the job is due"),
    ],
)
def test_a_bad_expiry_is_refused_at_push_naming_it(
    connection: Queue, queue_name: str, expires: object, message: str
) -> None:
    with pytest.raises(InvalidQueueArgumentError, match=message):
        connection.push(jobs.Noop(), queue=queue_name, expires=expires)
    assert connection.size(queue_name) == 0


def test_an_expiry_before_the_delay_is_refused(connection: Queue, queue_name: str) -> None:
    with pytest.raises(InvalidQueueArgumentError, match="expires comes before the job is due"):
        connection.push(jobs.Noop(), queue=queue_name, delay=60, expires=30)
    with pytest.raises(InvalidQueueArgumentError, match=r"tests\.jobs\.BadExpiry\.expires must be a number"):
        connection.push(jobs.BadExpiry(), queue=queue_name)
    assert connection.size(queue_name) == 0
