"""Admin retry and forget for a record that is gone (another operator forgot it): a warning, back to the list;
also when the other operator's Forget lands between this request reading the record and removing it."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.contrib.admin import site
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.db import connections as db_connections
from django.test import RequestFactory
from django.urls import reverse

from kinetis_queue import queues
from kinetis_queue.models import FailedJob
from kinetis_queue.worker import Worker
from tests import jobs
from tests.operator.test_admin import client_for
from tests.support.stray_logs import expected_errors

GONE = 2_000_000_000


@pytest.mark.parametrize(("view", "method"), [("retry", "post"), ("forget", "get"), ("forget", "post")])
def test_a_record_that_is_gone_is_said_so_and_leads_back_to_the_list(view: str, method: str) -> None:
    assert not FailedJob.objects.filter(pk=GONE).exists()
    client = client_for("full")
    url = reverse(f"admin:kinetis_queue_failedjob_{view}", args=[GONE])
    response = getattr(client, method)(url, {"post": "yes"} if method == "post" else {})
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:kinetis_queue_failedjob_changelist")
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert shown == [f"There is no failed job with id {GONE}."]


@pytest.fixture
def record(queue_name: str) -> FailedJob:
    """A record written by a real worker (a job that failed for good)."""
    queue = queues["sqlite"]
    job_id = queue.push(jobs.Fails("gone-label"), queue=queue_name, max_attempts=1)
    worker = Worker(queue)
    try:
        with expected_errors("kinetis_queue.worker"):  # the worker logs the failure it was made to record
            worker.process_next(5, [queue_name])
    finally:
        worker.close()
    return FailedJob.objects.get(job_id=job_id)


@contextmanager
def forgotten_by_another_operator_first(pk: int) -> Iterator[list[int]]:
    """The race, made deterministic: just before this request's DELETE of record ``pk`` reaches the
    database, another operator's Forget (its own thread, its own connection) removes the record.

    Yields the list of rows that other removal deleted (one entry per interleaving that happened)."""
    table = FailedJob._meta.db_table
    other: list[int] = []

    def other_operator() -> None:
        try:
            other.append(FailedJob.objects.filter(pk=pk).delete()[0])
        finally:
            db_connections.close_all()  # this thread's own connections

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if not other and sql.startswith("DELETE") and table in sql and pk in (params or ()):
            thread = threading.Thread(target=other_operator)
            thread.start()
            thread.join()
        return execute(sql, params, many, context)

    with db_connections["default"].execute_wrapper(wrapper):
        yield other


def test_forget_of_a_record_another_operator_forgets_meanwhile_says_it_is_gone(record: FailedJob) -> None:
    client = client_for("full")
    url = reverse("admin:kinetis_queue_failedjob_forget", args=[record.pk])

    with forgotten_by_another_operator_first(record.pk) as other:
        response = client.post(url, {"post": "yes"})

    assert other == [1]  # the other operator's removal is the one that happened
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:kinetis_queue_failedjob_changelist")
    assert [str(m) for m in get_messages(response.wsgi_request)] == [f"There is no failed job with id {record.pk}."]
    assert not LogEntry.objects.filter(object_id=str(record.pk), action_flag=DELETION).exists()


def test_the_bulk_forget_counts_only_what_it_removed(record: FailedJob) -> None:
    client = client_for("full")
    data = {"action": "forget_selected", "_selected_action": [str(record.pk)], "index": "0", "post": "yes"}

    with forgotten_by_another_operator_first(record.pk) as other:
        response = client.post(reverse("admin:kinetis_queue_failedjob_changelist"), data)

    assert other == [1]
    assert response.status_code == 302
    assert [str(m) for m in get_messages(response.wsgi_request)] == ["0 failed job(s) forgotten."]
    assert not LogEntry.objects.filter(object_id=str(record.pk), action_flag=DELETION).exists()


def test_get_actions_called_without_a_location_as_django_5_2_does() -> None:
    """Django 5.2 calls get_actions(request); 6.1 passes action_location too. Both lose delete_selected."""
    request = RequestFactory().get(reverse("admin:kinetis_queue_failedjob_changelist"))
    request.user = User.objects.create_superuser(f"root-{uuid.uuid4().hex[:12]}", password=None)
    model_admin = site._registry[FailedJob]

    actions = model_admin.get_actions(request)

    assert set(actions) == {"retry_selected", "forget_selected"}
