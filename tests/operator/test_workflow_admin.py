"""The chains-and-batches admin: every URL for each role, no argument value on any page, only the list
filters' lookups, Cancel through its confirmation (detail page and bulk action) with its history entry."""

from __future__ import annotations

import re
import uuid
from typing import Any
from urllib.parse import quote, quote_plus

import django
import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client, override_settings
from django.urls import reverse

from kinetis_queue import batch, chain
from kinetis_queue.models import Workflow, WorkflowMember
from kinetis_queue.workflows import Chain, WorkflowHandle
from tests import jobs
from tests.operator.test_admin import STATUS_SETTINGS

#: A Sensitive argument value, and a plain one: neither may reach a page (a member is shown by its class).
SECRET = "s3cr3t-TOKEN-workflow-value"
LABEL = "plain-label-workflow-value"
ROLES = ["anonymous", "non_staff", "staff_without_permission", "view_only", "full", "superuser"]
PAGES = ["changelist", "change", "nested", "add", "delete", "history", "cancel"]


def _user(role: str) -> User | None:
    if role == "anonymous":
        return None
    user = User.objects.create_user(f"wf-{role}-{uuid.uuid4().hex[:12]}", password=None)
    user.is_staff = role != "non_staff"
    user.is_superuser = role == "superuser"
    user.save()
    codenames = {
        "non_staff": ["view_workflow", "change_workflow"],
        "staff_without_permission": [],
        "view_only": ["view_workflow"],
        "full": ["view_workflow", "change_workflow"],
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


def running_batch(queue_name: str) -> WorkflowHandle:
    """A running batch on the SQL connection (written and pushed, nothing run): a job, a nested chain,
    two callbacks, each holding the Sensitive token and the plain label."""
    return batch(
        [jobs.Fails(LABEL, token=SECRET), Chain([jobs.Records(LABEL), jobs.Fails(LABEL, token=SECRET)])],
        on_success=jobs.Fails(LABEL, token=SECRET),
        on_complete=jobs.Records(LABEL),
        queue=queue_name,
        connection="sqlite",
    )


def running_chain(queue_name: str) -> WorkflowHandle:
    return chain([jobs.Fails(LABEL, token=SECRET), jobs.Records(LABEL)], queue=queue_name, connection="sqlite")


def nested_of(root: WorkflowHandle) -> Workflow:
    return Workflow.objects.get(parent_id=root.id)


def changelist_url() -> str:
    return reverse("admin:kinetis_queue_workflow_changelist")


def change_url(workflow_id: str) -> str:
    return reverse("admin:kinetis_queue_workflow_change", args=[workflow_id])


def cancel_url(workflow_id: str) -> str:
    return reverse("admin:kinetis_queue_workflow_cancel", args=[workflow_id])


def progress_html(ended: int, total: int, succeeded: int, failed: int, cancelled: int) -> str:
    """The progress column's cell as the admin renders it."""
    return (
        f"<strong>{ended}/{total}</strong> <span>{succeeded} succeeded,</span> <span>{failed} failed,</span>"
        f" <span>{cancelled} cancelled</span>"
    )


def assert_no_argument_value(body: str) -> None:
    assert SECRET not in body and LABEL not in body


def _state(workflow_id: str) -> str:
    return Workflow.objects.get(pk=workflow_id).state


def _entries(workflow_id: str) -> list[LogEntry]:
    return list(LogEntry.objects.filter(object_id=workflow_id, content_type__model="workflow"))


# -- every URL for each role ----------------------------------------------------------------------------

#: Expected status of a GET per role and URL.
EXPECTED_GET: dict[str, dict[str, int]] = {
    "anonymous": dict.fromkeys(PAGES, 302),
    "non_staff": dict.fromkeys(PAGES, 302),
    "staff_without_permission": dict.fromkeys(PAGES, 403),
    "view_only": {**dict.fromkeys(PAGES, 200), "add": 403, "delete": 403, "cancel": 403},
    "full": {**dict.fromkeys(PAGES, 200), "add": 403, "delete": 403},
}
EXPECTED_GET["superuser"] = EXPECTED_GET["full"]


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("page", PAGES)
def test_every_url_for_each_role(role: str, page: str, queue_name: str) -> None:
    root = running_batch(queue_name)
    url = {
        "changelist": changelist_url() + f"?q={root.id}",
        "change": change_url(root.id),
        "nested": change_url(nested_of(root).pk),
        "add": reverse("admin:kinetis_queue_workflow_add"),
        "delete": reverse("admin:kinetis_queue_workflow_delete", args=[root.id]),
        "history": reverse("admin:kinetis_queue_workflow_history", args=[root.id]),
        "cancel": cancel_url(root.id),
    }[page]
    response = client_for(role).get(url)
    assert response.status_code == EXPECTED_GET[role][page]
    if response.status_code == 302:
        assert response["Location"].startswith(reverse("admin:login"))
    assert_no_argument_value(response.content.decode())
    assert _state(root.id) == "running"  # no GET cancels
    if response.status_code == 200 and page in ("change", "nested"):
        assert 'name="_save"' not in response.content.decode()  # read-only, whatever the permissions


# -- the list ---------------------------------------------------------------------------------------------


def test_the_list_shows_top_level_workflows_with_their_progress(queue_name: str) -> None:
    ended = batch([jobs.Records(LABEL), jobs.Fails(LABEL, token=SECRET)], queue=queue_name, connection="sync")
    running = running_batch(queue_name)
    client = client_for("view_only")

    body = client.get(changelist_url(), {"q": ended.id}).content.decode()
    assert f'href="{change_url(ended.id)}?' in body  # the list's filters carried along
    assert progress_html(2, 2, 1, 1, 0) in body
    assert ">failed</span>" in body and '<td class="field-kind">batch</td>' in body
    assert '<td class="field-connection_shown">sync</td>' in body
    assert_no_argument_value(body)

    body = client.get(changelist_url(), {"q": running.id}).content.decode()
    assert progress_html(0, 2, 0, 0, 0) in body
    assert ">running</span>" in body
    # A nested workflow has a page of its own, reached from its parent's, but no line in the list.
    nested = nested_of(running)
    assert "0 results" in client.get(changelist_url(), {"q": nested.pk}).content.decode()
    assert client.get(change_url(nested.pk)).status_code == 200


def test_the_list_is_newest_first_and_searches_the_id_only(queue_name: str) -> None:
    first, second = running_chain(queue_name), running_chain(queue_name)
    # Both dated after anything else in the database, so both are on the list's first page whatever other
    # tests left (a page holds 100), the first one older than the second.
    newest = Workflow.objects.get(pk=second.id).created_at.replace(year=2999)
    Workflow.objects.filter(pk=second.id).update(created_at=newest)
    Workflow.objects.filter(pk=first.id).update(created_at=newest.replace(year=2998))
    client = client_for("view_only")
    body = client.get(changelist_url()).content.decode()
    assert body.index(second.id) < body.index(first.id)
    assert f'href="{change_url(first.id)}?' in client.get(changelist_url(), {"q": first.id[:12]}).content.decode()
    for guess in (SECRET, LABEL, "tests.jobs.Fails", queue_name):
        assert "0 results" in client.get(changelist_url(), {"q": guess}).content.decode(), guess


def test_the_list_filters_filter(queue_name: str) -> None:
    running = running_chain(queue_name)
    client = client_for("view_only")
    for parameters, shown in [
        ({"state": "running"}, True),
        ({"state": "cancelled"}, False),
        ({"kind": "chain"}, True),
        ({"kind": "batch"}, False),
        ({"connection": "sqlite", "state": "running", "kind": "chain"}, True),
        ({"connection": "sync"}, False),
        ({"connection__isnull": "True"}, False),
    ]:
        response = client.get(changelist_url(), {**parameters, "q": running.id})
        assert response.status_code == 200, parameters
        assert (f'href="{change_url(running.id)}' in response.content.decode()) is shown, parameters


def _normalized(response: Any, *echoed: str) -> tuple[int, str]:
    """Status and body, with per-render CSRF tokens and the echoed guesses taken out."""
    body = re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", response.content.decode())
    for text in echoed:
        for form in {text, quote(text), quote_plus(text), quote(quote(text)), quote_plus(quote_plus(text))}:
            body = body.replace(form, "GUESS")
    return response.status_code, body


@pytest.mark.parametrize("role", ["view_only", "superuser"])
@pytest.mark.parametrize(
    "parameter",
    [
        "members__spec__contains",
        "members__spec__icontains",
        "members__spec__regex",
        "members__spec",
        "children__members__spec__contains",
        "root__members__spec__contains",
    ],
)
@pytest.mark.logs_errors("django.security.DisallowedModelAdminLookup")
def test_no_lookup_on_a_members_spec_answers_a_guess(parameter: str, role: str, queue_name: str) -> None:
    """``?members__spec__contains=<guess>`` would count the workflows holding a guessed argument value:
    refused outright, the same answer for a right and a wrong guess."""
    running_chain(queue_name)
    right, wrong = SECRET, SECRET[:-1] + "X"
    assert WorkflowMember.objects.filter(spec__contains=right).exists()
    assert not WorkflowMember.objects.filter(spec__contains=wrong).exists()
    client = client_for(role)
    answers = [_normalized(client.get(changelist_url(), {parameter: guess}), guess) for guess in (right, wrong)]
    assert answers[0] == answers[1]
    assert answers[0][0] == 400


@pytest.mark.parametrize(
    "parameter",
    [
        "id",
        "id__in",
        "pk",
        "queue",
        "queue__contains",
        "parent__isnull",
        "parent",
        "root",
        "fail_fast",
        "created_at__gte",
        "finished_at__isnull",
        "members__job_class",
        "members__state",
        "state__contains",
        "kind__in",
        "nonexistent",
    ],
)
@pytest.mark.logs_errors("django.security.DisallowedModelAdminLookup")
def test_every_other_lookup_is_refused(parameter: str, queue_name: str) -> None:
    """The list filters' own parameters are the whole list of what may filter (as for failed jobs)."""
    running_chain(queue_name)
    assert client_for("superuser").get(changelist_url(), {parameter: "1"}).status_code == 400


def test_ordering_and_the_carried_filters_answer_no_guess(queue_name: str) -> None:
    root = running_chain(queue_name)
    client = client_for("superuser")
    for url, parameter, right, wrong in [
        (changelist_url(), "o", "members__spec", "members__spez"),
        (change_url(root.id), "_changelist_filters", f"members__spec__contains={SECRET}", "members__spec__contains=X"),
        (cancel_url(root.id), "_changelist_filters", f"members__spec__contains={SECRET}", "members__spec__contains=X"),
    ]:
        answers = [_normalized(client.get(url, {parameter: guess}), guess) for guess in (right, wrong)]
        assert answers[0] == answers[1], (url, parameter)
        assert answers[0][0] == 200


@pytest.mark.logs_errors("django.security.DisallowedModelAdminLookup")
def test_an_action_posted_with_a_forbidden_lookup_touches_nothing(queue_name: str) -> None:
    """Select-across with ``?members__spec__contains=`` would cancel exactly the workflows holding the guess."""
    root = running_chain(queue_name)
    url = changelist_url() + f"?members__spec__contains={SECRET}"
    response = client_for("superuser").post(
        url,
        {"action": "cancel_selected", "select_across": "1", "index": "0", "post": "yes", "_selected_action": [root.id]},
    )
    assert response.status_code == 400
    assert _state(root.id) == "running"


# -- the detail page --------------------------------------------------------------------------------------


def test_the_detail_page_lists_members_callbacks_and_links(queue_name: str) -> None:
    root = running_batch(queue_name)
    nested = nested_of(root)
    members = {m.index: m for m in WorkflowMember.objects.filter(workflow_id=root.id)}
    client = client_for("view_only")

    body = client.get(change_url(root.id)).content.decode()
    assert_no_argument_value(body)
    table = body[body.index('id="workflow-members"') : body.index('id="workflow-callbacks"')]
    assert "tests.jobs.Fails" in table and members[0].job_id in table
    assert f'<a href="{change_url(nested.pk)}">chain {nested.pk}</a>' in table
    assert table.count(">queued</span>") == 1 and table.count(">running</span>") == 1  # the job; the nested chain
    callbacks = body[body.index('id="workflow-callbacks"') :]
    callbacks = callbacks[: callbacks.index("</table>")]
    assert "<td>on_success</td>" in callbacks and "<td>on_complete</td>" in callbacks
    assert "on_failure</td>" not in callbacks  # none was given
    # The callback is shown by the job it carries, not by its carrier.
    assert "tests.jobs.Fails" in callbacks and "tests.jobs.Records" in callbacks
    assert "WorkflowCallback" not in body
    assert callbacks.count(">waiting</span>") == 2
    assert members[-1].job_id in callbacks and members[-3].job_id in callbacks
    assert "<strong>0/2</strong>" in body
    assert "at the first member that fails for good" in body
    assert "- (a top-level workflow)" in body and "- (this one)" in body

    body = client.get(change_url(nested.pk)).content.decode()
    assert_no_argument_value(body)
    assert body.count(f'<a href="{change_url(root.id)}">batch {root.id}</a>') == 2  # its parent, and its top
    assert "tests.jobs.Records" in body and 'id="workflow-callbacks"' not in body  # a chain has no callbacks
    assert body.count(">waiting</span>") == 1 and body.count(">queued</span>") == 1


def test_the_detail_page_never_reads_a_members_spec(queue_name: str) -> None:
    """Whatever the stored envelope holds (here: the secret in plain text, as a tampered row would), the page
    shows the member's display name only."""
    root = running_chain(queue_name)
    WorkflowMember.objects.filter(workflow_id=root.id).update(spec=f'{{"args": {{"plain": "{SECRET}"}}}}')
    body = client_for("superuser").get(change_url(root.id)).content.decode()
    assert "tests.jobs.Fails" in body
    assert_no_argument_value(body)


def test_a_long_workflow_lists_its_first_members_and_counts_them_all(
    queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("kinetis_queue.workflows.admin.MEMBERS_SHOWN", 2)
    root = batch([jobs.Records(LABEL) for _ in range(3)], queue=queue_name, connection="sqlite")
    body = client_for("view_only").get(change_url(root.id)).content.decode()
    assert "The first 2 of 3 members." in body
    table = body[body.index('id="workflow-members"') :]
    assert table[: table.index("</table>")].count("tests.jobs.Records") == 2
    assert "<strong>0/3</strong>" in body


@pytest.mark.parametrize("role", ["view_only", "full", "superuser"])
def test_cancel_is_offered_on_a_running_top_level_workflow_to_those_allowed(role: str, queue_name: str) -> None:
    root = running_batch(queue_name)
    ended = chain([jobs.Records(LABEL)], queue=queue_name, connection="sync")
    client = client_for(role)
    link = f'href="{cancel_url(root.id)}"'
    assert (link in client.get(change_url(root.id)).content.decode()) is (role != "view_only")
    assert "Cancel</a>" not in client.get(change_url(nested_of(root).pk)).content.decode()  # its top cancels it
    assert "Cancel</a>" not in client.get(change_url(ended.id)).content.decode()
    listing = client.get(changelist_url(), {"q": root.id}).content.decode()
    assert ('value="cancel_selected"' in listing) is (role != "view_only")


# -- Cancel from the detail page ------------------------------------------------------------------------------


def test_cancel_asks_first_then_cancels_and_writes_the_history(queue_name: str) -> None:
    root = running_batch(queue_name)
    client = client_for("full")
    user = User.objects.get(pk=client.session["_auth_user_id"])

    asked = client.get(cancel_url(root.id))
    assert asked.status_code == 200
    page = asked.content.decode()
    assert "Are you sure you want to cancel this batch?" in page
    assert 'name="post" value="yes"' in page and 'value="Yes, cancel"' in page
    assert f'href="{change_url(root.id)}" class="button cancel-link"' in page
    assert_no_argument_value(page)
    assert client.post(cancel_url(root.id)).status_code == 200  # a POST without the confirmation only asks
    assert _state(root.id) == "running" and _entries(root.id) == []

    response = client.post(cancel_url(root.id), {"post": "yes"})
    assert response.status_code == 302 and response["Location"] == change_url(root.id)
    assert {w.state for w in Workflow.objects.filter(root_id=root.id)} == {"cancelled"}
    assert set(WorkflowMember.objects.filter(workflow__root_id=root.id).values_list("state", flat=True)) == {
        "cancelled"
    }
    [entry] = _entries(root.id)
    assert (entry.action_flag, entry.change_message, entry.user_id) == (CHANGE, "Cancelled.", user.pk)
    assert entry.object_repr == f"batch {root.id}"
    shown = client.get(change_url(root.id)).content.decode()
    assert f"Batch {root.id} cancelled." in shown
    assert progress_html(2, 2, 0, 0, 2) in shown
    assert f'href="{cancel_url(root.id)}"' not in shown  # ended: no Cancel any more
    history = client.get(reverse("admin:kinetis_queue_workflow_history", args=[root.id])).content.decode()
    assert "Cancelled." in history


#: Per role: (status of the confirmed POST to cancel/, did it cancel?).
EXPECTED_CANCEL = {
    "anonymous": (302, False),
    "non_staff": (302, False),
    "staff_without_permission": (403, False),
    "view_only": (403, False),
    "full": (302, True),
    "superuser": (302, True),
}


@pytest.mark.parametrize("role", ROLES)
def test_the_cancel_post_for_each_role(role: str, queue_name: str) -> None:
    root = running_chain(queue_name)
    status, acted = EXPECTED_CANCEL[role]
    response = client_for(role).post(cancel_url(root.id), {"post": "yes"})
    assert response.status_code == status
    assert _state(root.id) == ("cancelled" if acted else "running")
    assert len(_entries(root.id)) == (1 if acted else 0)


def test_the_cancel_post_needs_the_csrf_token(queue_name: str) -> None:
    root = running_chain(queue_name)
    assert client_for("superuser", csrf=True).post(cancel_url(root.id), {"post": "yes"}).status_code == 403
    assert _state(root.id) == "running"


def test_cancel_leaves_ended_nested_and_unknown_workflows_alone(queue_name: str) -> None:
    ended = chain([jobs.Records(LABEL)], queue=queue_name, connection="sync")
    root = running_batch(queue_name)
    nested = nested_of(root)
    client = client_for("superuser")

    response = client.post(cancel_url(ended.id), {"post": "yes"})
    assert response.status_code == 302 and response["Location"] == change_url(ended.id)
    assert f"Chain {ended.id} has ended (succeeded)." in client.get(response["Location"]).content.decode()
    assert _state(ended.id) == "succeeded"

    response = client.post(cancel_url(nested.pk), {"post": "yes"})
    assert response["Location"] == change_url(nested.pk)
    assert "is nested: cancel its top workflow." in client.get(response["Location"]).content.decode()
    assert {w.state for w in Workflow.objects.filter(root_id=root.id)} == {"running"}

    response = client.post(cancel_url("0" * 32), {"post": "yes"})
    assert response["Location"] == changelist_url()
    assert not _entries(ended.id) and not _entries(nested.pk) and not _entries(root.id)


def test_the_change_form_cannot_edit_a_workflow(queue_name: str) -> None:
    root = running_chain(queue_name)
    response = client_for("superuser").post(change_url(root.id), {"state": "succeeded", "queue": "x", "_save": "Save"})
    assert response.status_code == 403
    assert _state(root.id) == "running"


# -- the bulk action ----------------------------------------------------------------------------------------


def _post_action(client: Client, ids: list[str], **extra: str) -> Any:
    data = {"action": "cancel_selected", "_selected_action": ids, "index": "0", **extra}
    return client.post(changelist_url(), data)


def test_the_bulk_cancel_asks_first_then_cancels_the_running_ones(queue_name: str) -> None:
    first, second = running_chain(queue_name), running_batch(queue_name)
    ended = batch([jobs.Records(LABEL)], queue=queue_name, connection="sync")
    ids = [first.id, second.id, ended.id]
    client = client_for("full")

    asked = _post_action(client, ids)
    assert asked.status_code == 200
    page = asked.content.decode()
    assert "Are you sure you want to cancel the selected chains and batches?" in page
    assert "Those that have ended already are left as they are." in page
    for workflow_id in ids:
        assert f'name="_selected_action" value="{workflow_id}"' in page
    assert 'name="action" value="cancel_selected"' in page and 'name="post" value="yes"' in page
    assert_no_argument_value(page)
    assert [_state(i) for i in ids] == ["running", "running", "succeeded"]

    # The confirmation's own form, as the browser sends it (no "index").
    response = client.post(
        changelist_url(), {"action": "cancel_selected", "_selected_action": ids, "post": "yes"}, follow=True
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert "2 chain(s) and batch(es) cancelled." in body and "1 had ended already: left as they were." in body
    assert [_state(i) for i in ids] == ["cancelled", "cancelled", "succeeded"]
    assert [len(_entries(i)) for i in ids] == [1, 1, 0]


def test_the_bulk_cancel_touches_no_nested_workflow(queue_name: str) -> None:
    """The action's rows are the list's: a nested id posted by hand selects nothing."""
    root = running_batch(queue_name)
    _post_action(client_for("superuser"), [nested_of(root).pk], post="yes")
    assert {w.state for w in Workflow.objects.filter(root_id=root.id)} == {"running"}


#: After the confirmed bulk action per role: (status code, did it cancel?).
EXPECTED_BULK = {
    "anonymous": (302, False),
    "non_staff": (302, False),
    "staff_without_permission": (403, False),
    "view_only": (403, False),  # not offered, and refused when posted anyway
    "full": (302, True),
    "superuser": (302, True),
}


@pytest.mark.parametrize("role", ROLES)
def test_the_bulk_cancel_for_each_role(role: str, queue_name: str) -> None:
    root = running_chain(queue_name)
    status, acted = EXPECTED_BULK[role]
    assert _post_action(client_for(role), [root.id], post="yes").status_code == status
    assert _state(root.id) == ("cancelled" if acted else "running")


# -- breadcrumbs and the status page -----------------------------------------------------------------------


def test_the_confirmation_uses_the_installed_djangos_breadcrumbs(queue_name: str) -> None:
    root = running_chain(queue_name)
    body = client_for("superuser").get(cancel_url(root.id)).content.decode()
    if django.VERSION >= (6, 1):
        assert '<ol class="breadcrumbs">' in body and '<div class="breadcrumbs">' not in body
        assert f'<li><a href="{changelist_url()}">Chains and batches</a></li>' in body
        assert f'<li><a href="{change_url(root.id)}">chain {root.id}</a></li>' in body
        assert '<li aria-current="page">Cancel</li>' in body
    else:
        assert '<div class="breadcrumbs">' in body and '<ol class="breadcrumbs">' not in body
        assert f'&rsaquo; <a href="{changelist_url()}">Chains and batches</a>' in body


@override_settings(KINETIS_QUEUE=STATUS_SETTINGS)
def test_the_status_page_counts_the_chains_and_batches(queue_name: str) -> None:
    running_chain(queue_name)
    client = client_for("superuser")
    body = client.get(reverse("admin:kinetis_queue_failedjob_status")).content.decode()
    line = body[body.index('<p id="workflow-counts">') :]
    line = line[: line.index("</p>")]
    assert f'<a href="{changelist_url()}">Chains and batches</a>' in line
    running = Workflow.objects.filter(parent__isnull=True, state="running").count()
    assert f"{running} running, " in line and " succeeded, " in line and " cancelled" in line

    # Staff who may see the failed jobs but not the workflows get the counts without the link.
    viewer = User.objects.create_user(f"wf-status-{uuid.uuid4().hex[:12]}", password=None, is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(codename="view_failedjob"))
    other = Client()
    other.force_login(viewer)
    body = other.get(reverse("admin:kinetis_queue_failedjob_status")).content.decode()
    assert f"{running} running" in body and changelist_url() not in body


def test_the_detail_page_of_an_ended_batch_shows_a_callback_that_never_fires_as_skipped(queue_name: str) -> None:
    """Issue 27 item 24: a batch that succeeded never fires on_failure: "skipped", not "waiting" forever."""
    from kinetis_queue import queues
    from kinetis_queue.worker import Worker

    root = batch(
        [jobs.Records(LABEL)],
        on_failure=jobs.Records(LABEL),
        queue=queue_name,
        connection="sqlite",
    )
    worker = Worker(queues["sqlite"], recorder=None)
    try:
        assert worker.process_next(10, [queue_name]) is True
    finally:
        worker.close()
    assert _state(root.id) == "succeeded"

    body = client_for("view_only").get(change_url(root.id)).content.decode()
    callbacks = body[body.index('id="workflow-callbacks"') :]
    callbacks = callbacks[: callbacks.index("</table>")]
    assert "<td>on_failure</td>" in callbacks
    assert callbacks.count(">skipped</span>") == 1 and ">waiting</span>" not in callbacks
