"""Conformance: a model argument's annotation bounds which rows a payload may load (issue 27 item 11).

A parameter annotated with the generic ``models.Model`` would let a stored payload load a row of any
installed model (``auth.User``, password hash included): such a class is refused at push, by the worker
and by ``manage.py check`` (E010, tests/operator/test_discovery.py). A reference naming a model other than
the annotated one (or a subclass) fails the job, and nothing is loaded.

The classes here are not in a discovery module: the worker-side tests rewrite a stored ``tests.jobs.Noop``
into them (a forged payload), as an attacker with write access to the store would.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import models

from kinetis_queue import Job
from kinetis_queue.contracts import Queue
from kinetis_queue.exceptions import UnserializableJobError
from kinetis_queue.models import FailedJob
from kinetis_queue.worker import Worker
from tests import jobs
from tests.conformance.test_worker import _rewrite_stored_job
from tests.support.backends import Backend

#: What handle() loaded, per test process.
LOADED: list[Any] = []


class AnyRow(Job):
    def __init__(self, instance: models.Model) -> None:
        self.instance = instance

    def handle(self) -> None:
        LOADED.append(self.instance)


class AnyRowOrNone(Job):
    def __init__(self, instance: models.Model | None = None) -> None:
        self.instance = instance

    def handle(self) -> None:
        LOADED.append(self.instance)


class GroupRow(Job):
    def __init__(self, group: Group) -> None:
        self.group = group

    def handle(self) -> None:
        LOADED.append(self.group)


GENERIC = "is annotated with the generic models.Model, which would let a stored payload load a row of any"


@pytest.fixture(autouse=True)
def _clear_loaded() -> None:
    LOADED.clear()


@pytest.fixture
def user(backend: Backend) -> Iterator[User]:
    alias = backend.database or "default"
    made = User.objects.using(alias).create(username=f"u{uuid.uuid4().hex[:20]}", password="pbkdf2_sha256$secret")
    yield made
    User.objects.using(alias).filter(pk=made.pk).delete()


def _reference(user: User) -> dict[str, Any]:
    return {"model": "auth.user", "pk": user.pk, "db": user._state.db}


def _work_one(connection: Queue, queue_name: str, job_id: str) -> tuple[str, str]:
    worker = Worker(connection)
    try:
        assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()
    record = FailedJob.objects.get(job_id=job_id)
    return record.exception_class, record.exception_message


@pytest.mark.parametrize("job_class", [AnyRow, AnyRowOrNone])
def test_a_parameter_annotated_with_the_generic_model_is_refused_at_push(
    connection: Queue, queue_name: str, user: User, job_class: type[Job]
) -> None:
    with pytest.raises(UnserializableJobError) as raised:
        connection.push(job_class(user), queue=queue_name)  # type: ignore[call-arg]
    assert str(raised.value).startswith(f"{job_class.__module__}.{job_class.__qualname__}: __init__ parameter instance")
    assert GENERIC in str(raised.value)
    assert LOADED == [] and connection.size(queue_name) == 0


@pytest.mark.trait("stores_jobs")
@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_forged_reference_for_a_generic_model_parameter_loads_nothing_and_fails_the_job(
    connection: Queue, backend: Backend, queue_name: str, user: User
) -> None:
    """The payload names auth.User for a ``models.Model`` parameter: before issue 27 the row was loaded."""
    job_id = connection.push(jobs.Noop(), queue=queue_name, max_attempts=1)
    _rewrite_stored_job(backend, job_id, f"{__name__}.AnyRow", {"instance": _reference(user)})
    exception_class, message = _work_one(connection, queue_name, job_id)
    assert LOADED == []
    assert exception_class == "kinetis_queue.exceptions.JobReconstructionError"
    assert message.startswith(f"{__name__}.AnyRow: __init__ parameter instance {GENERIC}")


@pytest.mark.trait("stores_jobs")
@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_forged_reference_to_another_model_loads_nothing_and_fails_the_job(
    connection: Queue, backend: Backend, queue_name: str, user: User
) -> None:
    job_id = connection.push(jobs.Noop(), queue=queue_name, max_attempts=1)
    _rewrite_stored_job(backend, job_id, f"{__name__}.GroupRow", {"group": _reference(user)})
    exception_class, message = _work_one(connection, queue_name, job_id)
    assert LOADED == []
    assert exception_class == "kinetis_queue.values.MalformedJobArgumentError"
    assert (
        message
        == f"{__name__}.GroupRow: argument group names model auth.User, which is not auth.Group or a subclass of it"
    )
