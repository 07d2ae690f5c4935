"""The dashboard (kinetis_queue/dashboard) in headless Chromium: the page as superuser, view-only staff and
anonymous for a known state (tests/operator/test_dashboard.py's), its figures against ``queue_status``'s,
its refresh, the page with JavaScript off, and each operation clicked through its confirmation.
Screenshots: reports/browser/dashboard-*.png.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings
from django.urls import reverse

from kinetis_queue import queues
from kinetis_queue.control import paused_queues
from kinetis_queue.models import FailedJob
from kinetis_queue.observability import status
from kinetis_queue.worker.restart import DatabaseRestartMarker
from tests import jobs
from tests.operator.browser.support import Session, WebDriverWait, start_chromium
from tests.operator.test_admin import SECRET
from tests.operator.test_dashboard import PLAIN_ARGUMENT, RUNNING_JOB_ID, SETTINGS, State, clean, known_state

#: The live server's KINETIS_QUEUE (conftest.py's live_url).
LIVE_SETTINGS = SETTINGS
CONNECTION = "browse"
URL = reverse("admin:kinetis_queue_failedjob_dashboard", args=[CONNECTION])


@pytest.fixture
def state(queue_name: str) -> Iterator[State]:
    with override_settings(KINETIS_QUEUE=SETTINGS):
        made = known_state(CONNECTION, queue_name)
        try:
            yield made
        finally:
            clean(made)


def _row(queue: str) -> str:
    return f"#dashboard-queues tr[data-queue='{queue}']"


def _figures(session: Session, queue: str) -> list[str]:
    return session.texts(f"{_row(queue)} td")[:6]


def _expected(queue: str) -> list[str]:
    (connection,) = status.collect(CONNECTION)
    (q,) = [q for q in connection.queues if q.queue == queue]
    s = q.stats
    return [queue, str(s.ready), str(s.delayed), str(s.reserved), str(q.failed), "paused" if q.paused else "no"]


@pytest.mark.parametrize("role", ["superuser", "view_only", "anonymous"])
def test_the_dashboard_for_each_user(role: str, browser: Any, live_url: str, state: State) -> None:
    session = Session(browser, live_url, role)
    body = session.get(URL)
    assert SECRET not in body and PLAIN_ARGUMENT not in body
    if role == "anonymous":
        assert session.has("#login-form")
        session.shot("dashboard", name="dashboard-anonymous")
        return
    assert _figures(session, state.queue) == _expected(state.queue) == [state.queue, "3", "1", "1", "2", "no"]
    for chart in ("#chart-deliveries", "#chart-failures"):
        assert session.count(f"{chart} svg rect.bar") == 60
    assert RUNNING_JOB_ID in session.text("#dashboard-running")
    assert "gone" in session.text("#dashboard-workers")
    # (Every read goes through one script: the refresh may swap the live part at any moment.)
    if role == "view_only":
        assert session.count("#content :is(form, input, button, .retry-link, .forget-link)") == 0
    else:  # (other tests' queues of the same database may be listed too, each with its Pause)
        assert session.count(f"{_row(state.queue)} form.pause-form") == 1
        assert session.count("#restart-form") == 1
        for operation in (".retry-link", ".forget-link"):  # one per record
            assert session.count(f"#dashboard-failed {operation}") == 2
    # The script says it refreshes, and does: a job pushed now shows within a few seconds.
    wait = WebDriverWait(browser, 30)
    wait.until(lambda driver: "Refreshes itself" in session.text("#dashboard-refresh-state"))
    queues[CONNECTION].push(jobs.Records(PLAIN_ARGUMENT), queue=state.queue)
    wait.until(lambda driver: session.text(f"{_row(state.queue)} .ready") == "4")
    assert _figures(session, state.queue) == _expected(state.queue)
    assert PLAIN_ARGUMENT not in browser.page_source
    session.shot("dashboard", whole=True, name=f"dashboard-{role.replace('_', '-')}")


def test_the_dashboard_without_javascript(live_url: str, state: State) -> None:
    driver = start_chromium(javascript=False)
    try:
        session = Session(driver, live_url, "view_only")
        session.get(URL)
        assert session.find("#dashboard-noscript").is_displayed()
        assert session.text("#dashboard-refresh-state") == "Figures as served."  # no script ran
        assert _figures(session, state.queue) == _expected(state.queue)
        assert session.count("#chart-deliveries svg rect.bar") == 60
        assert RUNNING_JOB_ID in session.text("#dashboard-running")
        session.shot("dashboard", whole=True, name="dashboard-no-js")
    finally:
        driver.quit()


def test_each_operation_through_its_confirmation(browser: Any, live_url: str, state: State) -> None:
    session = Session(browser, live_url, "superuser")
    session.get(URL)

    session.follow(f"{_row(state.queue)} input[type=submit][value=Pause]")
    assert "Are you sure you want to pause the queue" in session.text("#content")
    session.shot("dashboard", name="dashboard-pause-confirmation")
    assert state.queue not in paused_queues(CONNECTION)
    session.follow("#pause-confirm-form input[type=submit][value='Yes, pause']")
    assert browser.current_url == live_url + URL
    assert "paused: its workers take none of its jobs" in session.text(".messagelist")
    assert session.text(f"{_row(state.queue)} .paused-state") == "paused"
    session.follow(f"{_row(state.queue)} input[type=submit][value=Resume]")
    assert browser.current_url == live_url + URL and state.queue not in paused_queues(CONNECTION)

    generation = DatabaseRestartMarker(CONNECTION).read()
    session.follow("#restart-form input[type=submit]")
    assert "Are you sure you want to restart the workers" in session.text("#content")
    session.shot("dashboard", name="dashboard-restart-confirmation")
    session.follow("#restart-confirm-form input[type=submit][value='Yes, restart']")
    assert "Restart requested for connection browse" in session.text(".messagelist")
    assert DatabaseRestartMarker(CONNECTION).read() == generation + 1

    first, second = state.records
    session.follow(f"#dashboard-failed tr[data-record='{first.pk}'] .retry-link")
    assert "Are you sure you want to retry the failed job" in session.text("#content")
    session.shot("dashboard", name="dashboard-retry-confirmation")
    session.follow("#retry-confirm-form input[type=submit][value='Yes, retry']")
    assert browser.current_url == live_url + URL
    assert f"Failed job {first.pk} pushed again." in session.text(".messagelist")
    assert not FailedJob.objects.filter(pk=first.pk).exists()

    session.follow(f"#dashboard-failed tr[data-record='{second.pk}'] .forget-link")
    assert "Are you sure you want to forget this failed job?" in session.text("#content")
    session.shot("dashboard", name="dashboard-forget-confirmation")
    session.follow("input[type=submit][value='Yes, forget']")
    assert browser.current_url == live_url + URL
    assert f"Failed job {second.pk} forgotten." in session.text(".messagelist")
    assert not FailedJob.objects.filter(pk=second.pk).exists()
    assert "All 0 failed job(s) of this connection" in session.text("#dashboard-failed-link")
