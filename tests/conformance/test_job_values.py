"""Conformance: model instances and typed values as job arguments, on every backend (issue 19).

A job pushed with a saved model instance, a Decimal, a UUID and an application's registered value runs
in a worker and sees the same values in handle(); a row deleted before the worker runs fails the job
at once naming the model and key (or, opted in, acks it unrun); a value type the worker does not
register is malformed and recorded; a QuerySet is refused at push and nothing is written.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any

import pytest
from django.contrib.auth.models import User

from kinetis_queue import Job, JobContext, Sensitive, register_value, values
from kinetis_queue.contracts import Queue
from kinetis_queue.exceptions import UnserializableJobError
from kinetis_queue.failed import retry
from kinetis_queue.models import FailedJob
from kinetis_queue.payload.redaction import REDACTED, shown_args
from kinetis_queue.worker import Worker
from tests.support.backends import Backend

#: What handle() saw, per test process.
SEEN: list[dict[str, Any]] = []


@dataclass(frozen=True)
class Money:
    amount: Decimal
    currency: str


# Registered at import time, as an application's module would: the worker (here, this process) knows it.
register_value(
    "tests.conformance.money",
    1,
    Money,
    lambda value: {"amount": str(value.amount), "currency": value.currency},
    lambda data: Money(Decimal(data["amount"]), data["currency"]),
)


class Invoice(Job):
    def __init__(
        self, user: User, price: Decimal, reference: uuid.UUID, total: Money, pin: Annotated[Decimal, Sensitive]
    ) -> None:
        self.user = user
        self.price = price
        self.reference = reference
        self.total = total
        self.pin = pin

    def handle(self, context: JobContext) -> None:
        SEEN.append(
            {
                "user": (type(self.user), self.user.pk, self.user.username, self.user._state.db),
                "price": (type(self.price), str(self.price)),
                "reference": self.reference,
                "total": self.total,
                "pin": self.pin,
                "attempts": context.attempts,
            }
        )


class InvoiceUnlessGone(Invoice):
    delete_when_missing_models = True


class Report(Job):
    def __init__(self, users: Any) -> None:
        self.users = users

    def handle(self) -> None:
        SEEN.append({"users": self.users})


@pytest.fixture(autouse=True)
def _clear_seen() -> None:
    SEEN.clear()


@pytest.fixture
def user(backend: Backend) -> Iterator[User]:
    """A user in the backend's own database where it has one (so the alias travels), else in default."""
    alias = backend.database or "default"
    made = User.objects.using(alias).create(username=f"u{uuid.uuid4().hex[:20]}")
    yield made
    User.objects.using(alias).filter(pk=made.pk).delete()


def invoice(user: User, job_class: type[Invoice] = Invoice) -> Invoice:
    return job_class(user, Decimal("12.50"), uuid.UUID(int=42), Money(Decimal("99.90"), "EUR"), Decimal("4321"))


def work_one(connection: Queue, queue_name: str) -> bool:
    # Named, so a failed-job record names the connection queue_retry pushes back to.
    worker = Worker(connection, connection=connection.connection, retry_base_delay=0)
    try:
        return worker.process_next(5, [queue_name])
    finally:
        worker.close()


def names(outcomes: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [name for name, _ in outcomes]


def test_model_and_typed_values_reach_handle_as_pushed(
    connection: Queue, backend: Backend, queue_name: str, user: User, outcomes: list
) -> None:
    connection.push(invoice(user), queue=queue_name)
    if backend.stores_jobs:
        assert work_one(connection, queue_name) is True
    assert SEEN == [
        {
            "user": (User, user.pk, user.username, backend.database or "default"),
            "price": (Decimal, "12.50"),
            "reference": uuid.UUID(int=42),
            "total": Money(Decimal("99.90"), "EUR"),
            "pin": Decimal("4321"),
            "attempts": 1,
        }
    ]
    if backend.stores_jobs:
        assert names(outcomes) == ["job_succeeded"]
        assert connection.size(queue_name) == 0


@pytest.mark.trait("stores_jobs")
@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_row_deleted_before_the_worker_runs_fails_at_once_naming_model_and_key(
    connection: Queue, queue_name: str, user: User, outcomes: list
) -> None:
    job_id = connection.push(invoice(user), queue=queue_name, max_attempts=5)
    pk = user.pk
    user.delete()
    assert work_one(connection, queue_name) is True
    assert SEEN == []  # handle() never ran
    assert names(outcomes) == ["job_failed_permanently"]  # no retry: the row does not come back
    record = FailedJob.objects.get(job_id=job_id)
    assert record.attempts == 1
    assert record.exception_class == "kinetis_queue.values.MissingModelError"
    assert f"argument user: auth.User with primary key {pk} no longer exists" in record.exception_message
    # The record shows the reference and the typed values as the redaction rules allow: the Sensitive pin hidden.
    shown = json.loads(shown_args(record))
    assert shown["user"]["model"] == "auth.user" and shown["user"]["pk"] == pk
    assert shown["total"] == {
        "type": "tests.conformance.money",
        "version": 1,
        "data": {"amount": "99.90", "currency": "EUR"},
    }
    assert shown["pin"] == REDACTED
    assert connection.size(queue_name) == 0
    assert connection.pop(0.1, [queue_name]) is None


@pytest.mark.trait("stores_jobs")
@pytest.mark.parametrize("until", ["settled", "started"])
def test_delete_when_missing_models_acks_the_job_without_running_it_and_frees_its_key(
    connection: Queue,
    backend: Backend,
    queue_name: str,
    user: User,
    outcomes: list,
    until: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(InvoiceUnlessGone, "unique_until", until)
    key = f"invoice-{queue_name}"
    job_id = connection.push(
        invoice(user, InvoiceUnlessGone), queue=queue_name, max_attempts=5, unique_key=key, unique_for=300
    )
    user.delete()
    assert work_one(connection, queue_name) is True
    assert SEEN == []
    assert "job_failed_permanently" not in names(outcomes) and "job_released" not in names(outcomes)
    assert not FailedJob.objects.filter(job_id=job_id).exists()
    assert connection.size(queue_name) == 0
    assert connection.pop(0.1, [queue_name]) is None
    # The key went with the job: a new push under it is stored, not answered with the skipped job's id.
    other = User.objects.using(backend.database or "default").create(username=f"o{uuid.uuid4().hex[:20]}")
    try:
        again = connection.push(invoice(other, InvoiceUnlessGone), queue=queue_name, unique_key=key, unique_for=300)
        assert again != job_id
        assert connection.size(queue_name) == 1
    finally:
        other.delete()


@pytest.mark.trait("stores_jobs")
@pytest.mark.parametrize("unknown", ["alias", "version"])
@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_value_type_the_worker_does_not_register_is_malformed_and_reported(
    connection: Queue, queue_name: str, user: User, outcomes: list, monkeypatch: pytest.MonkeyPatch, unknown: str
) -> None:
    """Spec: unknown aliases/versions fail with a specific safe error; the payload never picks code to run."""
    job_id = connection.push(invoice(user), queue=queue_name, max_attempts=5)
    # The worker's registry: without the alias at all, or with another version of it only.
    monkeypatch.delitem(values._types, ("tests.conformance.money", 1))
    if unknown == "version":
        monkeypatch.setitem(
            values._types,
            ("tests.conformance.money", 3),
            values.ValueType("tests.conformance.money", 3, Money, str, str),
        )
    assert work_one(connection, queue_name) is True
    assert SEEN == []
    assert names(outcomes) == ["job_failed_permanently"]
    record = FailedJob.objects.get(job_id=job_id)
    assert (record.attempts, record.exception_class) == (1, "kinetis_queue.values.MalformedJobArgumentError")
    expected = (
        "names value type 'tests.conformance.money', which this process has not registered"
        if unknown == "alias"
        else "names value type 'tests.conformance.money' version 1, but this process registers only version(s) 3"
    )
    assert f"argument total {expected}" in record.exception_message
    assert "99.90" not in record.exception_message
    assert connection.size(queue_name) == 0
    # The record kept the payload: once the worker registers the value type, queue_retry runs it.
    monkeypatch.undo()
    retried = retry(record.pk)
    assert retried.error is None and retried.job_id is not None
    assert work_one(connection, queue_name) is True
    assert [seen["total"] for seen in SEEN] == [Money(Decimal("99.90"), "EUR")]


def test_a_queryset_is_refused_at_push_and_nothing_is_written(
    connection: Queue, backend: Backend, queue_name: str, user: User
) -> None:
    with pytest.raises(UnserializableJobError) as raised:
        connection.push(Report(User.objects.filter(pk=user.pk)), queue=queue_name)
    assert "argument users: a QuerySet is not allowed" in str(raised.value)
    assert SEEN == []
    if backend.stores_jobs:
        assert connection.size(queue_name) == 0
        assert connection.pop(0.1, [queue_name]) is None
