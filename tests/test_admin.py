"""The failed-jobs admin: every URL and action for each role, redaction on every page, CSRF on POSTs."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, quote_plus

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client, override_settings
from django.urls import reverse

from kinetis_queue import queues
from kinetis_queue.models import FailedJob
from kinetis_queue.worker import Worker
from tests import jobs

SECRET = "s3cr3t-TOKEN-admin-value"
ROLES = ["anonymous", "non_staff", "staff_without_permission", "view_only", "full", "superuser"]
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
    # No password (tests log in with force_login): hashing one would cost more than the test.
    user = User.objects.create_user(f"{role}-{uuid.uuid4().hex[:12]}", password=None)
    user.is_staff = role != "non_staff"
    user.is_superuser = role == "superuser"
    user.save()
    codenames = {
        "non_staff": ["view_failedjob", "change_failedjob", "delete_failedjob"],
        "staff_without_permission": [],
        "view_only": ["view_failedjob"],
        "full": ["view_failedjob", "change_failedjob", "delete_failedjob"],
        "superuser": [],
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
EXPECTED_GET["superuser"] = EXPECTED_GET["full"]


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
    "superuser": (302, True),
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
    """Forget asks first, as Django's delete_selected does; the confirmation's POST removes the record."""
    client = client_for(role)
    status, acted = EXPECTED_RETRY[role]
    asked = _post_action(client, "forget_selected", record)
    assert asked.status_code == (200 if acted else status)
    assert FailedJob.objects.filter(pk=record.pk).exists()
    if acted:
        page = asked.content.decode()
        assert "Are you sure you want to forget the selected failed jobs?" in page
        assert 'name="post" value="yes"' in page and f'name="_selected_action" value="{record.pk}"' in page
        assert SECRET not in page
    response = _post_action(client, "forget_selected", record, post="yes")
    assert response.status_code == status
    assert FailedJob.objects.filter(pk=record.pk).exists() is not acted


@pytest.mark.parametrize("role", ROLES)
def test_the_delete_confirmation_post_for_each_role(role: str, record: FailedJob) -> None:
    url = reverse("admin:kinetis_queue_failedjob_delete", args=[record.pk])
    response = client_for(role).post(url, {"post": "yes"})
    acted = role in ("full", "superuser")
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
        (lambda c, r: _post_action(c, "forget_selected", r, post="yes"), "forget"),
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
    assert "&#x27;os.system&#x27; is not a known Job subclass" in page
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


# -- the changelist is no oracle for stored text ------------------------------------------------------

#: Every text column of a record.
TEXT_FIELDS = ("args", "metadata", "exception_message", "traceback", "job_class", "job_id", "queue", "connection",
               "exception_class")
#: Every lookup a guesser could try on text ("" is the bare field name, an exact match).
TEXT_LOOKUPS = ("", "exact", "iexact", "contains", "icontains", "startswith", "istartswith", "endswith", "iendswith",
                "regex", "iregex", "in", "gt", "gte", "lt", "lte")
#: The parameters the list filters themselves send: safe metadata, offered as choices anyway.
FILTER_PARAMETERS = {"connection", "connection__isnull", "queue", "queue__isnull", "exception_class",
                     "exception_class__isnull", "failed_at__gte", "failed_at__lt"}


@pytest.fixture
def secret_record(queue_name: str) -> FailedJob:
    """A record whose every text column holds a value of its own, a unique secret in each (as a record
    written before exception texts were scrubbed would); no commas, so ``__in`` can match it whole."""
    secret = f"s3cret{uuid.uuid4().hex[:16]}"
    return FailedJob.objects.create(
        connection=f"conn{secret}", queue=queue_name, job_id=uuid.uuid4().hex, job_class=f"tests.jobs.Fails{secret}",
        args=json.dumps({"token": secret}), metadata=json.dumps({"trace": f"meta{secret}"}), attempts=1,
        max_attempts=1, exception_class=f"builtins.Error{secret}", exception_message=f"failed with {secret}",
        traceback=f"Traceback (most recent call last):\nRuntimeError: {secret}",
    )


def _guesses(stored: str, lookup: str) -> tuple[str, str]:
    """A right and a wrong guess of ``stored`` for ``lookup``."""
    if lookup in ("gt", "gte"):
        return stored[:-1], stored + "~"
    if lookup in ("lt", "lte"):
        return stored + "~", stored[:-1]
    right = {
        "iexact": stored.swapcase(), "contains": stored[3:-3], "icontains": stored[3:-3].upper(),
        "startswith": stored[:-3], "istartswith": stored[:-3].swapcase(), "endswith": stored[3:],
        "iendswith": stored[3:].swapcase(), "regex": rf"^{stored[:4]}[\s\S]*{stored[-4:]}$",
        "iregex": rf"^{stored[:4].swapcase()}[\s\S]*{stored[-4:].swapcase()}$",
    }.get(lookup, stored)
    wrong = right[:-1] + ("0" if right[-1] != "0" else "1")
    if lookup in ("regex", "iregex"):
        wrong = right[:-2] + ("0" if right[-2] != "0" else "1") + "$"
    return right, wrong


def _normalized(response: Any, *echoed: str) -> tuple[int, str]:
    """Status and body, with per-render CSRF tokens and the echoed guesses taken out."""
    body = re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", response.content.decode())
    for text in echoed:
        for form in {text, quote(text), quote_plus(text), quote(quote(text)), quote_plus(quote_plus(text))}:
            body = body.replace(form, "GUESS")
    return response.status_code, body


def _oracle_cases() -> list[Any]:
    return [pytest.param(field, lookup, id=f"{field}__{lookup or 'bare'}")
            for field in TEXT_FIELDS for lookup in TEXT_LOOKUPS
            if (f"{field}__{lookup}" if lookup else field) not in FILTER_PARAMETERS]


@pytest.mark.parametrize("role", ["view_only", "superuser"])
@pytest.mark.parametrize(("field", "lookup"), _oracle_cases())
def test_no_lookup_on_stored_text_answers_a_guess(field: str, lookup: str, role: str,
                                                   secret_record: FailedJob) -> None:
    """Regression (issue 12, item 1): ``?args__contains=<guess>`` counted the rows whose arguments held the
    guess, so a view-only user could read a Sensitive value one character at a time. Only the list
    filters' own parameters may reach the query: any other lookup answers the same for every guess."""
    parameter = f"{field}__{lookup}" if lookup else field
    right, wrong = _guesses(getattr(secret_record, field), lookup)

    def matches(guess: str) -> int:
        value: Any = guess.split(",") if lookup == "in" else guess
        return FailedJob.objects.filter(**{parameter: value}).count()

    assert matches(right) != matches(wrong), "the two guesses must be told apart by the data itself"
    client = client_for(role)
    url = reverse("admin:kinetis_queue_failedjob_changelist")
    answers = [_normalized(client.get(url, {parameter: guess}), guess) for guess in (right, wrong)]
    assert answers[0] == answers[1]
    assert answers[0][0] == 400  # refused outright, before any query
