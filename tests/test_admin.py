"""The failed-jobs admin: every URL and action for each role, redaction on every page, CSRF on POSTs."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client, override_settings
from django.urls import reverse

from kinetis_queue import queues
from kinetis_queue.models import FailedJob
from kinetis_queue.worker import Worker
from tests import jobs

SECRET = "s3cr3t-TOKEN-admin-value"
ROLES = ["anonymous", "non_staff", "staff_without_permission", "view_only", "full"]
#: Only SQL and sync connections, so the status page does not reach for servers other tests own.
STATUS_SETTINGS = {
    "DEFAULT_CONNECTION": "sqlite",
    "CONNECTIONS": {
        "sqlite": {"BACKEND": "sql", "DATABASE": "default", "VISIBILITY_TIMEOUT": 1},
        "postgres": {"BACKEND": "sql", "DATABASE": "postgres", "VISIBILITY_TIMEOUT": 1},
        "sync": {"BACKEND": "sync"},
    },
}


def _user(role: str) -> User | None:
    if role == "anonymous":
        return None
    user = User.objects.create_user(f"{role}-{uuid.uuid4().hex[:12]}", password="x")
    user.is_staff = role != "non_staff"
    user.save()
    codenames = {
        "non_staff": ["view_failedjob", "change_failedjob", "delete_failedjob"],
        "staff_without_permission": [],
        "view_only": ["view_failedjob"],
        "full": ["view_failedjob", "change_failedjob", "delete_failedjob"],
    }[role]
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="kinetis_queue",
                                                        codename__in=codenames))
    return User.objects.get(pk=user.pk)  # a fresh instance: no cached permissions


def client_for(role: str, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    user = _user(role)
    if user is not None:
        client.force_login(user)
    return client


@pytest.fixture
def record(queue_name: str) -> FailedJob:
    """A record written by a real worker: a job with a Sensitive token that failed for good."""
    queue = queues["sqlite"]
    job_id = queue.push(jobs.Fails("visible-label", token=SECRET), queue=queue_name, max_attempts=1)
    worker = Worker(queue)
    try:
        worker.process_next(5, [queue_name])
    finally:
        worker.close()
    return FailedJob.objects.get(job_id=job_id)


def _urls(record: FailedJob) -> dict[str, str]:
    return {
        "changelist": reverse("admin:kinetis_queue_failedjob_changelist"),
        "change": reverse("admin:kinetis_queue_failedjob_change", args=[record.pk]),
        "add": reverse("admin:kinetis_queue_failedjob_add"),
        "delete": reverse("admin:kinetis_queue_failedjob_delete", args=[record.pk]),
        "history": reverse("admin:kinetis_queue_failedjob_history", args=[record.pk]),
        "status": reverse("admin:kinetis_queue_failedjob_status"),
    }


#: Expected status of a GET per role and URL.
EXPECTED_GET: dict[str, dict[str, int]] = {
    "anonymous": dict.fromkeys(("changelist", "change", "add", "delete", "history", "status"), 302),
    "non_staff": dict.fromkeys(("changelist", "change", "add", "delete", "history", "status"), 302),
    "staff_without_permission": dict.fromkeys(("changelist", "change", "add", "delete", "history", "status"), 403),
    "view_only": {"changelist": 200, "change": 200, "add": 403, "delete": 403, "history": 200, "status": 200},
    "full": {"changelist": 200, "change": 200, "add": 403, "delete": 200, "history": 200, "status": 200},
}


@override_settings(KINETIS_QUEUE=STATUS_SETTINGS)
@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("page", ["changelist", "change", "add", "delete", "history", "status"])
def test_every_admin_url_for_each_role(role: str, page: str, record: FailedJob) -> None:
    response = client_for(role).get(_urls(record)[page])
    assert response.status_code == EXPECTED_GET[role][page]
    if response.status_code == 302:
        assert response["Location"].startswith(reverse("admin:login"))
    body = response.content.decode()
    assert SECRET not in body
    if response.status_code == 200 and page == "change":
        assert "visible-label" in body and "[redacted]" in body
        assert "RuntimeError: deliberate failure" in body  # the exception and its traceback
        assert "Traceback (most recent call last)" in body
        assert 'name="_save"' not in body  # a record is read-only, whatever the permissions


def _post_action(client: Client, action: str, record: FailedJob, **extra: str) -> Any:
    data = {"action": action, "_selected_action": [str(record.pk)], "index": "0", **extra}
    return client.post(reverse("admin:kinetis_queue_failedjob_changelist"), data)


#: After a retry action per role: (status code, was the job pushed and the record removed?).
EXPECTED_RETRY = {
    "anonymous": (302, False),
    "non_staff": (302, False),
    "staff_without_permission": (403, False),
    "view_only": (200, False),  # the action is not offered: nothing happens
    "full": (302, True),
}


@pytest.mark.parametrize("role", ROLES)
def test_the_retry_action_for_each_role(role: str, record: FailedJob, queue_name: str) -> None:
    response = _post_action(client_for(role), "retry_selected", record)
    status, acted = EXPECTED_RETRY[role]
    assert response.status_code == status
    assert FailedJob.objects.filter(pk=record.pk).exists() is not acted
    assert queues["sqlite"].size(queue_name) == (1 if acted else 0)
    if acted:
        job = queues["sqlite"].pop(5, [queue_name])
        assert job is not None and job.attempts == 1 and job.args["token"] == SECRET
        queues["sqlite"].ack(job)


@pytest.mark.parametrize("role", ROLES)
def test_the_forget_action_for_each_role(role: str, record: FailedJob) -> None:
    response = _post_action(client_for(role), "forget_selected", record)
    status, acted = EXPECTED_RETRY[role]
    assert response.status_code == status
    assert FailedJob.objects.filter(pk=record.pk).exists() is not acted


@pytest.mark.parametrize("role", ROLES)
def test_the_delete_confirmation_post_for_each_role(role: str, record: FailedJob) -> None:
    url = reverse("admin:kinetis_queue_failedjob_delete", args=[record.pk])
    response = client_for(role).post(url, {"post": "yes"})
    acted = role == "full"
    assert response.status_code == {"anonymous": 302, "non_staff": 302}.get(role, 302 if acted else 403)
    assert FailedJob.objects.filter(pk=record.pk).exists() is not acted


def test_the_change_form_cannot_edit_a_record(record: FailedJob) -> None:
    url = reverse("admin:kinetis_queue_failedjob_change", args=[record.pk])
    response = client_for("full").post(url, {"queue": "elsewhere", "job_class": "os.system", "_save": "Save"})
    assert response.status_code == 403
    stored = FailedJob.objects.get(pk=record.pk)
    assert (stored.queue, stored.job_class) == (record.queue, "tests.jobs.Fails")


@pytest.mark.parametrize(
    ("post", "name"),
    [
        (lambda c, r: _post_action(c, "retry_selected", r), "retry"),
        (lambda c, r: _post_action(c, "forget_selected", r), "forget"),
        (lambda c, r: c.post(reverse("admin:kinetis_queue_failedjob_delete", args=[r.pk]), {"post": "yes"}),
         "delete"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_posts_need_the_csrf_token(post: Callable[[Client, FailedJob], Any], name: str, record: FailedJob,
                                   queue_name: str) -> None:
    response = post(client_for("full", csrf=True), record)
    assert response.status_code == 403
    assert FailedJob.objects.filter(pk=record.pk).exists()
    assert queues["sqlite"].size(queue_name) == 0


def test_retrying_a_tampered_record_pushes_nothing_and_says_why(record: FailedJob, queue_name: str) -> None:
    FailedJob.objects.filter(pk=record.pk).update(job_class="os.system")
    client = client_for("full")
    response = _post_action(client, "retry_selected", record)
    assert response.status_code == 302
    page = client.get(response["Location"]).content.decode()
    assert f"Failed job {record.pk} was not retried: JobReconstructionError" in page
    assert "&#x27;os.system&#x27; cannot be resolved: it is not a Job subclass" in page
    assert FailedJob.objects.filter(pk=record.pk).exists()
    assert queues["sqlite"].size(queue_name) == 0


def test_search_never_reaches_the_arguments(record: FailedJob) -> None:
    client = client_for("view_only")
    url = reverse("admin:kinetis_queue_failedjob_changelist")
    found = client.get(url, {"q": SECRET}).content.decode()
    assert "0 results" in found
    assert f"/{record.pk}/change/" in client.get(url, {"q": record.job_id}).content.decode()


def test_a_record_whose_arguments_do_not_decode_shows_none_of_them(record: FailedJob) -> None:
    FailedJob.objects.filter(pk=record.pk).update(args='{"token": "' + SECRET + '", "label": NaN}')
    page = client_for("view_only").get(reverse("admin:kinetis_queue_failedjob_change", args=[record.pk]))
    assert page.status_code == 200
    body = page.content.decode()
    assert SECRET not in body and "do not decode" in body


@override_settings(KINETIS_QUEUE=STATUS_SETTINGS)
def test_the_status_page_shows_the_figures_per_connection_and_queue(record: FailedJob, queue_name: str) -> None:
    queue = queues["sqlite"]
    queue.push(jobs.Noop(), queue=queue_name)
    queue.push(jobs.Noop(), queue=queue_name, delay=3600)
    try:
        page = client_for("view_only").get(reverse("admin:kinetis_queue_failedjob_status")).content.decode()
    finally:
        queues.clearable("sqlite").clear(queue_name)
    row = page[page.index(f"<td>{queue_name}</td>"):]
    row = row[: row.index("</tr>")]
    cells = [c.split("</td>")[0].strip() for c in row.split("<td>")[2:]]
    assert cells == ["1", "1", "0", "2", "1"]  # ready, delayed, reserved, waiting, failed
    assert "<td>sync</td>" in page
    assert json.dumps(SECRET) not in page and SECRET not in page
