"""The failed-jobs admin in headless Chromium: every page as superuser, view-only staff and anonymous,
each operation clicked through, the list's fit in a 1280 px window; the chains-and-batches pages and
their Cancel. Screenshots go to reports/browser/.

The live server, the browser and the Session are shared with the dashboard's browser tests (conftest.py,
support.py).
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.urls import reverse
from django.utils import timezone

from kinetis_queue import batch, chain, queues
from kinetis_queue.models import FailedJob, Workflow, WorkflowMember
from kinetis_queue.workflows import Chain, WorkflowHandle
from tests import jobs
from tests.operator.browser.support import HEIGHT, WIDTH, By, Select, Session  # skips the module without selenium
from tests.operator.test_admin import SECRET

#: Names as long as real projects have them: the list must still show the failure time.
LONG_TASK = "acme_billing.tasks.invoicing.reconcile_outstanding_customer_invoices_for_accounting_period"
LONG_EXCEPTION = "acme_billing.gateways.exceptions.PaymentGatewayTemporarilyUnavailableError"


def _record(queue_name: str, **fields: Any) -> FailedJob:
    values: dict[str, Any] = {
        "queue": queue_name,
        "job_id": uuid.uuid4().hex,
        "job_class": "tests.jobs.Fails",
        "args": json.dumps({"label": "visible-label", "token": SECRET}),
        "attempts": 3,
        "max_attempts": 3,
        "exception_class": "builtins.RuntimeError",
        "exception_message": "deliberate failure",
        "traceback": "Traceback (most recent call last):\nRuntimeError: deliberate failure",
    }
    return FailedJob.objects.create(**{**values, **fields})


def _changelist(queue_name: str) -> str:
    return reverse("admin:kinetis_queue_failedjob_changelist") + f"?queue={queue_name}"


@pytest.mark.parametrize("role", ["superuser", "view_only", "anonymous"])
def test_each_page_for_each_user(role: str, browser: Any, live_url: str, queue_name: str) -> None:
    record = _record(queue_name)
    session = Session(browser, live_url, role)
    pages = {
        "list": _changelist(queue_name),
        "detail": reverse("admin:kinetis_queue_failedjob_change", args=[record.pk]),
        "status": reverse("admin:kinetis_queue_failedjob_status"),
    }
    for page, url in pages.items():
        body = session.get(url)
        session.shot(page)
        assert SECRET not in body
        if role == "anonymous":
            assert session.has("#login-form"), page
            continue
        # The admin's CSS arrived (static files served) and styles the breadcrumbs' markup.
        crumbs = session.find(".breadcrumbs")
        assert crumbs.value_of_css_property("background-color") == "rgba(38, 75, 93, 1)", page
        assert "Failed jobs" in crumbs.text
    if role == "anonymous":
        return
    session.get(pages["detail"])
    assert "visible-label" in session.find(".field-arguments").text
    assert "[redacted]" in session.find(".field-arguments").text
    assert session.has("#retry-form") is (role == "superuser")
    assert session.has("#forget-link") is (role == "superuser")
    session.get(pages["list"])
    assert session.has("select[name=action]") is (role == "superuser")


def test_the_list_fits_1280_pixels_with_the_failure_time_in_view(browser: Any, live_url: str, queue_name: str) -> None:
    import kinetis_queue.contrib.receivers  # noqa: F401  (registers the carrier, so the list names the receiver)

    for _ in range(3):
        _record(
            queue_name,
            job_class="kinetis_queue.contrib.receivers.QueuedReceiverJob",
            args=json.dumps({"receiver": LONG_TASK, "sender": None, "kwargs": {"token": SECRET}}),
            exception_class=LONG_EXCEPTION,
            connection="a-rather-long-connection-name",
        )
    session = Session(browser, live_url, "superuser")
    browser.set_window_size(WIDTH, HEIGHT)
    session.get(_changelist(queue_name))
    session.shot("list-1280")
    width = browser.execute_script("return window.innerWidth")
    cells = browser.find_elements(
        By.CSS_SELECTOR, "#result_list .column-failed_at_shown, #result_list .field-failed_at_shown"
    )
    assert len(cells) == 4  # the header and three rows
    for cell in cells:
        rect = cell.rect
        assert cell.is_displayed() and rect["x"] >= 0 and rect["x"] + rect["width"] <= width, rect
    # Nothing of the table is hidden behind a horizontal scroll either.
    assert browser.execute_script(
        "const r = document.querySelector('#changelist .results');return r.scrollWidth <= r.clientWidth"
    )
    assert LONG_TASK.rpartition(".")[2] in session.find("#result_list").text


def test_bulk_retry_and_forget(browser: Any, live_url: str, queue_name: str) -> None:
    first, second = _record(queue_name), _record(queue_name)
    session = Session(browser, live_url, "superuser")

    def run(action: str, record: FailedJob) -> None:
        session.get(_changelist(queue_name))
        session.find(f"input[name=_selected_action][value='{record.pk}']").click()
        Select(session.find("select[name=action]")).select_by_value(action)
        session.follow("button[name=index]")

    run("retry_selected", first)
    assert "1 failed job(s) pushed again." in session.find(".messagelist").text
    session.shot("bulk-retry-done")
    assert not FailedJob.objects.filter(pk=first.pk).exists()
    job = queues["sqlite"].pop(5, [queue_name])
    assert job is not None and job.args["token"] == SECRET
    queues["sqlite"].ack(job)

    run("forget_selected", second)
    assert "Are you sure you want to forget the selected failed jobs?" in session.find("#content").text
    session.shot("bulk-forget-confirmation")
    assert FailedJob.objects.filter(pk=second.pk).exists()
    session.follow("input[type=submit][value='Yes, forget']")
    assert "1 failed job(s) forgotten." in session.find(".messagelist").text
    assert not FailedJob.objects.filter(pk=second.pk).exists()


def test_detail_page_retry_and_forget(browser: Any, live_url: str, queue_name: str) -> None:
    first, second = _record(queue_name), _record(queue_name)
    session = Session(browser, live_url, "superuser")

    session.get(reverse("admin:kinetis_queue_failedjob_change", args=[first.pk]))
    browser.execute_script("arguments[0].scrollIntoView()", session.find(".failedjob-operations"))
    session.shot("detail-operations")
    session.follow("#retry-form input[type=submit]")
    assert f"Failed job {first.pk} pushed again." in session.find(".messagelist").text
    assert not FailedJob.objects.filter(pk=first.pk).exists()
    job = queues["sqlite"].pop(5, [queue_name])
    assert job is not None
    queues["sqlite"].ack(job)

    session.get(reverse("admin:kinetis_queue_failedjob_change", args=[second.pk]))
    session.follow("#forget-link")
    assert "Are you sure you want to forget this failed job?" in session.find("#content").text
    session.shot("detail-forget-confirmation")
    session.follow("a.cancel-link")  # "No, take me back": the record is untouched
    assert session.has("#forget-link") and FailedJob.objects.filter(pk=second.pk).exists()
    session.follow("#forget-link")
    session.follow("input[type=submit][value='Yes, forget']")
    assert f"Failed job {second.pk} forgotten." in session.find(".messagelist").text
    assert not FailedJob.objects.filter(pk=second.pk).exists()


# -- chains and batches ---------------------------------------------------------------------------------


def _workflows(queue_name: str) -> dict[str, WorkflowHandle]:
    """One workflow per state, newest first in the list: a running batch (a job, a nested chain, two
    callbacks), a cancelled chain, a failed batch and a succeeded chain; each member holds the secret."""
    done = chain([jobs.Records("a"), jobs.Records("b")], queue=queue_name, connection="sync")
    failed = batch([jobs.Records("c"), jobs.Fails("d", token=SECRET)], queue=queue_name, connection="sync")
    cancelled = chain([jobs.Fails("e", token=SECRET), jobs.Records("f")], queue=queue_name, connection="sqlite")
    cancelled.cancel()
    running = batch(
        [jobs.Fails("g", token=SECRET), Chain([jobs.Records("h"), jobs.Fails("i", token=SECRET)])],
        on_success=jobs.Fails("j", token=SECRET),
        on_complete=jobs.Records("k"),
        queue=queue_name,
        connection="sqlite",
    )
    return {"running": running, "cancelled": cancelled, "failed": failed, "succeeded": done}


@pytest.mark.parametrize("role", ["superuser", "view_only"])
def test_the_workflow_pages_for_each_user(role: str, browser: Any, live_url: str, queue_name: str) -> None:
    made = _workflows(queue_name)
    session = Session(browser, live_url, role)
    browser.set_window_size(WIDTH, HEIGHT)

    body = session.get(reverse("admin:kinetis_queue_workflow_changelist"))
    session.shot("workflows-list")
    assert SECRET not in body
    rows = session.find("#result_list").text
    for state, handle in made.items():
        assert handle.id[:8] in rows, state  # the id's first digits; its title has it whole
    assert "2/2 1 succeeded, 1 failed, 0 cancelled" in rows  # the failed batch's progress
    assert session.find(".breadcrumbs").value_of_css_property("background-color") == "rgba(38, 75, 93, 1)"
    assert session.has("select[name=action]") is (role == "superuser")

    session.follow(
        f"#result_list a[href^='{reverse('admin:kinetis_queue_workflow_change', args=[made['running'].id])}']"
    )
    session.shot("workflow-detail", whole=True)
    assert SECRET not in str(browser.page_source)
    members = session.find("#workflow-members").text
    assert "tests.jobs.Fails" in members and "queued" in members
    callbacks = session.find("#workflow-callbacks").text
    assert "on_success" in callbacks and "on_complete" in callbacks and "waiting" in callbacks
    assert session.has("#cancel-link-workflow") is (role == "superuser")

    session.follow("#workflow-members a")  # the nested chain's own page
    assert "tests.jobs.Records" in session.find("#workflow-members").text
    assert f"batch {made['running'].id}" in session.find(".field-parent_link").text
    assert not session.has("#cancel-link-workflow")  # a nested workflow is cancelled with its top one
    if role == "superuser":
        session.shot("workflow-nested", whole=True)


def test_cancel_a_workflow_through_its_confirmation(browser: Any, live_url: str, queue_name: str) -> None:
    made = _workflows(queue_name)
    other = chain([jobs.Records("l"), jobs.Records("m")], queue=queue_name, connection="sqlite")
    session = Session(browser, live_url, "superuser")
    browser.set_window_size(WIDTH, HEIGHT)
    running = made["running"].id

    session.get(reverse("admin:kinetis_queue_workflow_change", args=[running]))
    browser.execute_script("arguments[0].scrollIntoView()", session.find(".workflow-operations"))
    session.follow("#cancel-link-workflow")
    assert "Are you sure you want to cancel this batch?" in session.find("#content").text
    session.shot("workflow-cancel-confirmation")
    session.follow("a.cancel-link")  # "No, take me back": nothing changed
    assert session.has("#cancel-link-workflow") and Workflow.objects.get(pk=running).state == "running"
    session.follow("#cancel-link-workflow")
    session.follow("input[type=submit][value='Yes, cancel']")
    assert f"Batch {running} cancelled." in session.find(".messagelist").text
    assert "cancelled" in session.find(".field-state_shown").text
    assert not session.has("#cancel-link-workflow")
    session.shot("workflow-cancelled", whole=True)
    assert {w.state for w in Workflow.objects.filter(root_id=running)} == {"cancelled"}

    session.get(reverse("admin:kinetis_queue_workflow_changelist") + "?state=running")
    session.find(f"input[name=_selected_action][value='{other.id}']").click()
    Select(session.find("select[name=action]")).select_by_value("cancel_selected")
    session.follow("button[name=index]")
    assert "Are you sure you want to cancel the selected chains and batches?" in session.find("#content").text
    session.shot("workflows-bulk-cancel-confirmation")
    session.follow("input[type=submit][value='Yes, cancel']")
    assert "1 chain(s) and batch(es) cancelled." in session.find(".messagelist").text
    assert Workflow.objects.get(pk=other.id).state == "cancelled"


def _big_workflow(connection: str, queue_name: str, kind: str, states: dict[str, int]) -> Workflow:
    """A top-level workflow written as the engine writes one, with ``states`` counting its members."""
    now = timezone.now()
    running = states.get("queued", 0) > 0
    workflow = Workflow(
        id=uuid.uuid4().hex,
        kind=kind,
        connection=connection,
        queue=queue_name,
        state="running" if running else "failed",
        created_at=now - timedelta(minutes=5),
        finished_at=None if running else now,
    )
    workflow.root = workflow
    workflow.save(force_insert=True)
    index = iter(range(sum(states.values())))
    WorkflowMember.objects.bulk_create(
        WorkflowMember(
            workflow=workflow,
            index=next(index),
            kind="job",
            job_id=uuid.uuid4().hex,
            job_class=LONG_TASK,
            state=state,
            updated_at=now,
        )
        for state, count in states.items()
        for _ in range(count)
    )
    return workflow


def test_the_workflow_list_fits_1280_pixels(browser: Any, live_url: str, queue_name: str) -> None:
    """Long connection and queue names, thousands of members: the list still fits beside both sidebars."""
    connection = f"a-rather-long-connection-name-{uuid.uuid4().hex[:6]}"
    long_queue = f"{queue_name}-reconcile-outstanding-invoices"
    _big_workflow(connection, long_queue, "batch", {"succeeded": 9990, "failed": 7, "cancelled": 3})
    _big_workflow(connection, long_queue, "batch", {"succeeded": 4000, "queued": 6000})
    _big_workflow(connection, long_queue, "chain", {"succeeded": 12, "failed": 1, "cancelled": 87})
    session = Session(browser, live_url, "superuser")
    browser.set_window_size(WIDTH, HEIGHT)
    session.get(reverse("admin:kinetis_queue_workflow_changelist") + f"?connection={connection}")
    session.shot("workflows-list-1280")
    rows = session.find("#result_list").text
    assert "10000/10000 9990 succeeded, 7 failed, 3 cancelled" in rows
    assert len(browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")) == 3
    width = browser.execute_script("return window.innerWidth")
    for cell in browser.find_elements(By.CSS_SELECTOR, "#result_list .field-created_shown"):
        rect = cell.rect
        assert cell.is_displayed() and rect["x"] >= 0 and rect["x"] + rect["width"] <= width, rect
    # Nothing of the table is hidden behind a horizontal scroll.
    assert browser.execute_script(
        "const r = document.querySelector('#changelist .results');return r.scrollWidth <= r.clientWidth"
    ), browser.execute_script(
        "return [...document.querySelectorAll('#result_list thead th')].map(t => t.className + ':' + t.offsetWidth)"
    )


def test_status_page_pause_and_resume(browser: Any, live_url: str, queue_name: str) -> None:
    """A superuser pauses a queue (after the confirmation) and resumes it; view-only staff see the state only."""
    from kinetis_queue.control import paused_queues, resume

    queue = queues["postgres"]
    queue.push(jobs.Noop(), queue=queue_name)  # listed on the status page
    row = f"tr[data-connection='postgres'][data-queue='{queue_name}']"
    status = reverse("admin:kinetis_queue_failedjob_status")
    try:
        session = Session(browser, live_url, "superuser")
        session.get(status)
        assert session.find(f"{row} .paused-state").text == "no"
        session.follow(f"{row} input[type=submit][value=Pause]")
        assert "Are you sure you want to pause the queue" in session.find("#content").text
        session.shot("status-pause-confirmation")
        assert paused_queues("postgres").count(queue_name) == 0  # the confirmation page changed nothing
        session.follow("#pause-confirm-form input[type=submit][value='Yes, pause']")
        assert "paused: its workers take none of its jobs" in session.find(".messagelist").text
        assert session.find(f"{row} .paused-state").text == "paused"
        assert queue_name in paused_queues("postgres")
        session.shot("status-paused")

        viewer = Session(browser, live_url, "view_only")
        viewer.get(status)
        assert viewer.find(f"{row} .paused-state").text == "paused"
        assert not viewer.has(f"{row} form") and not viewer.has("form.pause-form")
        viewer.shot("status-paused")

        session = Session(browser, live_url, "superuser")
        session.get(status)
        session.follow(f"{row} input[type=submit][value=Resume]")  # no confirmation: resuming loses nothing
        assert "resumed: its workers take its jobs again" in session.find(".messagelist").text
        assert session.find(f"{row} .paused-state").text == "no"
        assert queue_name not in paused_queues("postgres")
    finally:
        resume(queue_name, "postgres")
        queues.clearable("postgres").clear(queue_name)


def test_every_queue_paused_from_the_status_page_and_resumed_from_the_dashboard(
    browser: Any, live_url: str, queue_name: str
) -> None:
    """Issue 30 item 3: "Pause every queue of postgres" (after its confirmation) pauses every queue of the
    connection; the status page and the dashboard's header say so; the dashboard's "Resume every queue" lifts it."""
    from kinetis_queue.control import ALL_QUEUES, all_paused, resume

    queue = queues["postgres"]
    queue.push(jobs.Noop(), queue=queue_name)  # listed on the status page
    row = f"tr[data-connection='postgres'][data-queue='{queue_name}']"
    status = reverse("admin:kinetis_queue_failedjob_status")
    try:
        session = Session(browser, live_url, "superuser")
        session.get(status)
        session.follow("form.pause-all-form[data-connection='postgres'] input[type=submit]")
        assert "every queue of connection postgres" in session.find("#content").text
        session.shot("status-pause-all-confirmation")
        assert not all_paused("postgres")  # the confirmation page changed nothing
        session.follow("#pause-confirm-form input[type=submit][value='Yes, pause']")
        assert "Every queue of connection postgres paused" in session.find(".messagelist").text
        assert session.find(f"{row} .paused-state").text == "paused"
        assert not session.has(f"{row} form")  # a queue's own Resume would not lift the pause of every queue
        assert "Every queue of postgres is paused" in session.find("p.all-paused[data-connection='postgres']").text
        assert all_paused("postgres")
        session.shot("status-all-paused")

        session.get(reverse("admin:kinetis_queue_failedjob_dashboard", args=["postgres"]))
        assert "Every queue of this connection is paused" in session.find("#dashboard-all-paused").text
        session.shot("dashboard-all-paused")
        session.follow("#dashboard-all-paused input[type=submit][value='Resume every queue']")
        assert "Every queue of connection postgres resumed" in session.find(".messagelist").text
        assert not session.has("#dashboard-all-paused") and session.has("#dashboard-pause-all")
        assert not all_paused("postgres")
    finally:
        resume(ALL_QUEUES, "postgres")
        queues.clearable("postgres").clear(queue_name)
