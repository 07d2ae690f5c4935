"""The failed-jobs admin: every URL and action for each role, redaction on every page, CSRF on POSTs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus, urlencode

import django
import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client, override_settings
from django.urls import reverse

from kinetis_queue import queues
from kinetis_queue.db.transactions import write_atomic
from kinetis_queue.models import FailedJob
from kinetis_queue.worker import Worker
from tests import jobs
from tests.support.stray_logs import expected_errors

ROOT = Path(__file__).resolve().parents[2]
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
    # The test's own writes begin IMMEDIATE, as docs/backends/sql.md advises a project on SQLite: setting the
    # permissions reads, then writes, and a DEFERRED transaction that must upgrade its lock while another
    # connection writes (the history writer the `record` fixture's worker started) fails at once with
    # "database is locked" instead of waiting its timeout.
    with write_atomic("default"):
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
        user.user_permissions.set(
            Permission.objects.filter(content_type__app_label="kinetis_queue", codename__in=codenames)
        )
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
        with expected_errors("kinetis_queue.worker"):  # the worker logs the failure it was made to record
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
        (lambda c, r: c.post(reverse("admin:kinetis_queue_failedjob_delete", args=[r.pk]), {"post": "yes"}), "delete"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_posts_need_the_csrf_token(
    post: Callable[[Client, FailedJob], Any], name: str, record: FailedJob, queue_name: str
) -> None:
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
    row = page[page.index(f"<td>{queue_name}</td>") :]
    row = row[: row.index("</tr>")]
    cells = [c.split("</td>")[0].strip() for c in row.split("<td>")[2:]]
    assert cells == ["1", "1", "0", "2", "1"]  # ready, delayed, reserved, waiting, failed
    assert "<td>sync</td>" in page
    assert json.dumps(SECRET) not in page and SECRET not in page


# -- the changelist is no oracle for stored text ------------------------------------------------------

#: Every text column of a record.
TEXT_FIELDS = (
    "args",
    "metadata",
    "exception_message",
    "traceback",
    "job_class",
    "job_id",
    "queue",
    "connection",
    "exception_class",
)
#: Every lookup a guesser could try on text ("" is the bare field name, an exact match).
TEXT_LOOKUPS = (
    "",
    "exact",
    "iexact",
    "contains",
    "icontains",
    "startswith",
    "istartswith",
    "endswith",
    "iendswith",
    "regex",
    "iregex",
    "in",
    "gt",
    "gte",
    "lt",
    "lte",
)
#: The parameters the list filters themselves send: safe metadata, offered as choices anyway.
FILTER_PARAMETERS = {
    "connection",
    "connection__isnull",
    "queue",
    "queue__isnull",
    "exception_class",
    "exception_class__isnull",
    "failed_at__gte",
    "failed_at__lt",
}


@pytest.fixture
def secret_record(queue_name: str) -> FailedJob:
    """A record whose every text column holds a unique value of its own: the Sensitive token in the arguments,
    and in the exception texts and metadata other secrets (as a record written before exception texts were
    scrubbed would hold them); no commas, so ``__in`` can match a whole value."""

    def unique(prefix: str) -> str:
        return f"{prefix}{uuid.uuid4().hex[:16]}"

    return FailedJob.objects.create(
        connection=unique("conn"),
        queue=queue_name,
        job_id=uuid.uuid4().hex,
        job_class=unique("tests.jobs.Fails"),
        args=json.dumps({"token": unique("s3cret")}),
        metadata=json.dumps({"trace": unique("meta")}),
        attempts=1,
        max_attempts=1,
        exception_class=unique("builtins.Error"),
        exception_message=unique("failed with "),
        traceback=f"Traceback (most recent call last):\nRuntimeError: {unique('tb')}",
    )


def _guesses(stored: str, lookup: str) -> tuple[str, str]:
    """A right and a wrong guess of ``stored`` for ``lookup``."""
    if lookup in ("gt", "gte"):
        return stored[:-1], stored + "~"
    if lookup in ("lt", "lte"):
        return stored + "~", stored[:-1]
    right = {
        "iexact": stored.swapcase(),
        "contains": stored[3:-3],
        "icontains": stored[3:-3].upper(),
        "startswith": stored[:-3],
        "istartswith": stored[:-3].swapcase(),
        "endswith": stored[3:],
        "iendswith": stored[3:].swapcase(),
        "regex": rf"^{stored[:4]}[\s\S]*{stored[-10:]}$",
        "iregex": rf"^{stored[:4].swapcase()}[\s\S]*{stored[-10:].swapcase()}$",
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
    return [
        pytest.param(field, lookup, id=f"{field}__{lookup or 'bare'}")
        for field in TEXT_FIELDS
        for lookup in TEXT_LOOKUPS
        if (f"{field}__{lookup}" if lookup else field) not in FILTER_PARAMETERS
    ]


@pytest.mark.parametrize("role", ["view_only", "superuser"])
@pytest.mark.parametrize(("field", "lookup"), _oracle_cases())
@pytest.mark.logs_errors("django.security.DisallowedModelAdminLookup")
def test_no_lookup_on_stored_text_answers_a_guess(field: str, lookup: str, role: str, secret_record: FailedJob) -> None:
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


@pytest.mark.parametrize("role", ["view_only", "superuser"])
def test_search_and_ordering_answer_no_guess(role: str, secret_record: FailedJob) -> None:
    """``q`` covers safe metadata only and ``o`` only the listed columns: neither tells a stored secret."""
    secret = json.loads(secret_record.args)["token"]
    client = client_for(role)
    url = reverse("admin:kinetis_queue_failedjob_changelist")
    for parameter, right, wrong in [
        ("q", secret, secret[:-1] + "X"),
        ("o", "args", "argz"),
        ("o", f"-{secret}", f"-{secret[:-1]}X"),
    ]:
        answers = [_normalized(client.get(url, {parameter: guess}), guess) for guess in (right, wrong)]
        assert answers[0] == answers[1], parameter


@pytest.mark.parametrize("page", ["change", "delete", "history", "forget"])
def test_changelist_filters_carried_by_a_record_page_are_not_evaluated(page: str, secret_record: FailedJob) -> None:
    """``_changelist_filters`` is only carried along in links; a page never filters by it."""
    secret = json.loads(secret_record.args)["token"]
    client = client_for("superuser")
    url = reverse(f"admin:kinetis_queue_failedjob_{page}", args=[secret_record.pk])
    answers = [
        _normalized(client.get(url, {"_changelist_filters": f"args__contains={guess}"}), guess)
        for guess in (secret, secret[:-1] + "X")
    ]
    assert answers[0] == answers[1]
    assert answers[0][0] == 200


@pytest.mark.logs_errors("django.security.DisallowedModelAdminLookup")
def test_an_action_posted_with_a_forbidden_lookup_touches_nothing(secret_record: FailedJob) -> None:
    """Select-across with ``?args__contains=`` would forget exactly the records holding the guess."""
    secret = json.loads(secret_record.args)["token"]
    url = reverse("admin:kinetis_queue_failedjob_changelist") + f"?args__contains={secret}"
    response = client_for("superuser").post(
        url,
        {
            "action": "forget_selected",
            "select_across": "1",
            "index": "0",
            "post": "yes",
            "_selected_action": [str(secret_record.pk)],
        },
    )
    assert response.status_code == 400
    assert FailedJob.objects.filter(pk=secret_record.pk).exists()


def test_the_list_filters_still_filter(secret_record: FailedJob, queue_name: str) -> None:
    client = client_for("view_only")
    url = reverse("admin:kinetis_queue_failedjob_changelist")
    change = f"/{secret_record.pk}/change/"
    for parameters, shown in [
        ({"queue": queue_name}, True),
        ({"queue": queue_name + "x"}, False),
        ({"queue": queue_name, "exception_class": secret_record.exception_class}, True),
        ({"queue": queue_name, "connection__isnull": "True"}, False),
        (
            {
                "queue": queue_name,
                "failed_at__gte": "2000-01-01 00:00:00+00:00",
                "failed_at__lt": "2999-01-01 00:00:00+00:00",
            },
            True,
        ),
    ]:
        response = client.get(url, parameters)
        assert response.status_code == 200
        assert (change in response.content.decode()) is shown, parameters


# -- the task's own name ------------------------------------------------------------------------------

CARRIERS = [
    pytest.param(
        "kinetis_queue.contrib.receivers",
        "QueuedReceiverJob",
        {"receiver": "myapp.receivers.on_invoice_paid", "sender": None, "kwargs": {"secret": SECRET}},
        "myapp.receivers.on_invoice_paid",
        id="queued-receiver",
    ),
    pytest.param(
        "kinetis_queue.contrib.tasks.backend",
        "RunTask",
        {
            "task_path": "myapp.tasks.send_invoice",
            "args": [SECRET],
            "kwargs": {},
            "result_id": "r1",
            "backend": "default",
        },
        "myapp.tasks.send_invoice",
        id="django-task",
    ),
]


@pytest.mark.parametrize(("module", "carrier", "args", "name"), CARRIERS)
def test_list_and_detail_name_the_task_not_its_carrier(
    module: str, carrier: str, args: dict[str, Any], name: str, queue_name: str
) -> None:
    pytest.importorskip(module)  # registers the carrier class (the django.tasks backend needs a django.tasks API)
    record = FailedJob.objects.create(
        queue=queue_name,
        job_id=uuid.uuid4().hex,
        job_class=f"{module}.{carrier}",
        args=json.dumps(args),
        attempts=1,
        exception_class="builtins.RuntimeError",
        exception_message="boom",
    )
    client = client_for("view_only")
    listing = client.get(reverse("admin:kinetis_queue_failedjob_changelist"), {"queue": queue_name})
    detail = client.get(reverse("admin:kinetis_queue_failedjob_change", args=[record.pk]))
    for page in (listing.content.decode().replace("<wbr>", ""), detail.content.decode()):
        assert name in page
        assert carrier not in page
        assert SECRET not in page


# -- Retry and Forget on the detail page ----------------------------------------------------------------

#: Per role: (status of a POST to retry/ or forget/, did it act?).
EXPECTED_DETAIL_POST = {
    "anonymous": (302, False),
    "non_staff": (302, False),
    "staff_without_permission": (403, False),
    "view_only": (403, False),
    "full": (302, True),
    "superuser": (302, True),
}


@pytest.mark.parametrize("role", ROLES)
def test_the_detail_page_offers_retry_and_forget_to_those_allowed(role: str, record: FailedJob) -> None:
    response = client_for(role).get(reverse("admin:kinetis_queue_failedjob_change", args=[record.pk]))
    body = response.content.decode()
    allowed = role in ("full", "superuser")
    retry = reverse("admin:kinetis_queue_failedjob_retry", args=[record.pk])
    forget = reverse("admin:kinetis_queue_failedjob_forget", args=[record.pk])
    assert (f'action="{retry}"' in body and 'name="_retry"' in body) is allowed
    assert (f'href="{forget}"' in body) is allowed
    assert "deletelink" not in body or allowed  # Forget replaces Django's Delete link
    assert f'href="{reverse("admin:kinetis_queue_failedjob_delete", args=[record.pk])}"' not in body


@pytest.mark.parametrize("role", ROLES)
def test_the_detail_page_retry_for_each_role(role: str, record: FailedJob, queue_name: str) -> None:
    client = client_for(role)
    url = reverse("admin:kinetis_queue_failedjob_retry", args=[record.pk])
    status, acted = EXPECTED_DETAIL_POST[role]
    response = client.post(url)
    assert response.status_code == status
    assert FailedJob.objects.filter(pk=record.pk).exists() is not acted
    assert queues["sqlite"].size(queue_name) == (1 if acted else 0)
    if acted:
        assert response["Location"] == reverse("admin:kinetis_queue_failedjob_changelist")
        assert client.get(url).status_code == 405  # a GET never retries
        job = queues["sqlite"].pop(5, [queue_name])
        assert job is not None and job.args["token"] == SECRET
        queues["sqlite"].ack(job)


@pytest.mark.parametrize("role", ROLES)
def test_the_detail_page_forget_asks_first_for_each_role(role: str, record: FailedJob) -> None:
    client = client_for(role)
    url = reverse("admin:kinetis_queue_failedjob_forget", args=[record.pk])
    status, acted = EXPECTED_DETAIL_POST[role]
    asked = client.get(url)
    assert asked.status_code == (200 if acted else status)
    if acted:
        page = asked.content.decode()
        assert "Are you sure you want to forget this failed job?" in page
        assert 'name="post" value="yes"' in page and SECRET not in page
        assert client.post(url).status_code == 200  # a POST without the confirmation only asks
    assert FailedJob.objects.filter(pk=record.pk).exists()
    response = client.post(url, {"post": "yes"})
    assert response.status_code == status
    assert FailedJob.objects.filter(pk=record.pk).exists() is not acted


@pytest.mark.parametrize("name", ["retry", "forget"])
def test_the_detail_page_posts_need_the_csrf_token(name: str, record: FailedJob, queue_name: str) -> None:
    url = reverse(f"admin:kinetis_queue_failedjob_{name}", args=[record.pk])
    assert client_for("superuser", csrf=True).post(url, {"post": "yes"}).status_code == 403
    assert FailedJob.objects.filter(pk=record.pk).exists()
    assert queues["sqlite"].size(queue_name) == 0


def test_a_failed_retry_from_the_detail_page_returns_to_the_record(record: FailedJob, queue_name: str) -> None:
    FailedJob.objects.filter(pk=record.pk).update(job_class="os.system")
    client = client_for("full")
    response = client.post(reverse("admin:kinetis_queue_failedjob_retry", args=[record.pk]))
    change = reverse("admin:kinetis_queue_failedjob_change", args=[record.pk])
    assert response.status_code == 302 and response["Location"] == change
    assert f"Failed job {record.pk} was not retried: JobReconstructionError" in client.get(change).content.decode()
    assert FailedJob.objects.filter(pk=record.pk).exists() and queues["sqlite"].size(queue_name) == 0
    assert not LogEntry.objects.filter(object_id=str(record.pk)).exists()


def test_the_detail_page_carries_the_list_filters_back(record: FailedJob, queue_name: str) -> None:
    client = client_for("full")
    filters = f"queue={queue_name}"
    url = reverse("admin:kinetis_queue_failedjob_forget", args=[record.pk])
    response = client.post(url + "?" + urlencode({"_changelist_filters": filters}), {"post": "yes"})
    assert response["Location"] == reverse("admin:kinetis_queue_failedjob_changelist") + "?" + filters


# -- the admin history --------------------------------------------------------------------------------

OPERATIONS = {
    "bulk retry": lambda c, r: _post_action(c, "retry_selected", r),
    "bulk forget": lambda c, r: _post_action(c, "forget_selected", r, post="yes"),
    "detail retry": lambda c, r: c.post(reverse("admin:kinetis_queue_failedjob_retry", args=[r.pk])),
    "detail forget": lambda c, r: c.post(reverse("admin:kinetis_queue_failedjob_forget", args=[r.pk]), {"post": "yes"}),
    "delete page": lambda c, r: c.post(reverse("admin:kinetis_queue_failedjob_delete", args=[r.pk]), {"post": "yes"}),
}


@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_retry_and_forget_are_written_to_the_admin_history(operation: str, record: FailedJob, queue_name: str) -> None:
    client = client_for("full")
    user = User.objects.get(pk=client.session["_auth_user_id"])
    assert OPERATIONS[operation](client, record).status_code == 302
    assert not FailedJob.objects.filter(pk=record.pk).exists()
    entries = list(LogEntry.objects.filter(object_id=str(record.pk), content_type__model="failedjob"))
    assert len(entries) == 1
    entry = entries[0]
    assert entry.user_id == user.pk and entry.object_repr == str(record)
    if "retry" in operation:
        job = queues["sqlite"].pop(5, [queue_name])
        assert job is not None
        queues["sqlite"].ack(job)
        assert (entry.action_flag, entry.change_message) == (CHANGE, f"Retried: pushed again as job {job.id}.")
    else:
        assert entry.action_flag == DELETION
        assert entry.change_message == ("" if operation == "delete page" else "Forgotten.")
    assert SECRET not in entry.change_message + entry.object_repr


@pytest.mark.parametrize("role", ["view_only", "superuser"])
def test_pages_use_the_installed_djangos_breadcrumbs(role: str, record: FailedJob) -> None:
    """Django 6.1 marks breadcrumbs up as an <ol> of <li>, 5.2 and 6.0 as a <div> with &rsaquo;: the installed one's."""
    client = client_for(role)
    pages = [reverse("admin:kinetis_queue_failedjob_status")]
    if role == "superuser":
        pages.append(reverse("admin:kinetis_queue_failedjob_forget", args=[record.pk]))
    with override_settings(KINETIS_QUEUE=STATUS_SETTINGS):
        for url in pages:
            body = client.get(url).content.decode()
            changelist = reverse("admin:kinetis_queue_failedjob_changelist")
            if django.VERSION >= (6, 1):
                assert '<ol class="breadcrumbs">' in body and '<div class="breadcrumbs">' not in body
                assert f'<li><a href="{changelist}">Failed jobs</a></li>' in body
                assert '<li aria-current="page">' in body
            else:
                assert '<div class="breadcrumbs">' in body and '<ol class="breadcrumbs">' not in body
                assert f'&rsaquo; <a href="{changelist}">Failed jobs</a>' in body


@pytest.mark.parametrize(
    "parameter",
    [
        "id__in",
        "pk",
        "attempts__gt",
        "max_attempts__isnull",
        "failed_at__year",
        "failed_at__date",
        "failed_at__gt",
        "args__isnull",
        "traceback__isnull",
        "nonexistent",
        "queue__exact",
        "queue__contains",
    ],
)
@pytest.mark.logs_errors("django.security.DisallowedModelAdminLookup")
def test_every_other_lookup_is_refused(parameter: str, secret_record: FailedJob) -> None:
    """Not only text: the list filters' own parameters are the whole list of what may filter."""
    response = client_for("superuser").get(reverse("admin:kinetis_queue_failedjob_changelist"), {parameter: "1"})
    assert response.status_code == 400


FRESH_PROCESS = """
import json, django
django.setup()
from django.contrib import admin
from kinetis_queue.models import FailedJob
column = admin.site._registry[FailedJob].job
args = {"task_path": "myapp.tasks.send_invoice", "args": [], "kwargs": {}, "result_id": "r1", "backend": "default"}
print(column(FailedJob(job_class="kinetis_queue.contrib.tasks.backend.RunTask", args=json.dumps(args))))
"""


def test_a_fresh_admin_process_names_the_task() -> None:
    """What an operator's admin process shows, with nothing else imported first."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(ROOT)}
    shown = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    ).stdout.strip()
    assert shown.replace("<wbr>", "") == "myapp.tasks.send_invoice"
