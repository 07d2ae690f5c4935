"""The status page's paused state and its Pause and Resume buttons (kinetis_queue.control): POST with CSRF,
a confirmation before a pause, the FailedJob "change" permission, and nothing changed by a GET."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import override_settings
from django.urls import reverse

from kinetis_queue.control import all_paused, pause, paused_queues, resume
from tests.operator.test_admin import STATUS_SETTINGS, client_for

STATUS = reverse("admin:kinetis_queue_failedjob_status")
PAUSE = reverse("admin:kinetis_queue_failedjob_pause")
RESUME = reverse("admin:kinetis_queue_failedjob_resume")

pytestmark = pytest.mark.usefixtures("status_settings")


@pytest.fixture
def status_settings() -> Iterator[None]:
    with override_settings(KINETIS_QUEUE=STATUS_SETTINGS):
        yield


@pytest.fixture
def listed(queue_name: str) -> Iterator[str]:
    """A queue the status page lists (a paused one is listed even with no job); resumed afterwards."""
    pause(queue_name, "postgres")
    try:
        yield queue_name
    finally:
        resume(queue_name, "postgres")


def _row(page: str, queue: str) -> str:
    row = page[page.index(f'data-queue="{queue}"') :]
    return row[: row.index("</tr>")]


def test_a_superuser_pauses_after_a_confirmation_and_resumes_at_once(listed: str) -> None:
    client = client_for("superuser")
    row = _row(client.get(STATUS).content.decode(), listed)
    assert '<td class="paused-state">paused</td>' in row and 'value="Resume"' in row
    assert client.post(RESUME, {"connection": "postgres", "queue": listed}).status_code == 302
    assert listed not in paused_queues("postgres")
    page = client.get(STATUS).content.decode()
    assert "resumed: its workers take its jobs again" in page
    assert f'data-queue="{listed}"' not in page  # no job, no failure, not paused: no longer listed

    confirmation = client.post(PAUSE, {"connection": "postgres", "queue": listed})
    assert confirmation.status_code == 200
    body = confirmation.content.decode()
    assert "Are you sure you want to pause the queue" in body and 'name="post" value="yes"' in body
    assert listed not in paused_queues("postgres")  # the confirmation page changes nothing
    done = client.post(PAUSE, {"connection": "postgres", "queue": listed, "post": "yes"})
    assert (done.status_code, done["Location"]) == (302, STATUS)
    assert listed in paused_queues("postgres")
    assert "paused: its workers take none of its jobs" in client.get(STATUS).content.decode()


def test_view_only_staff_see_the_state_and_no_button(listed: str) -> None:
    client = client_for("view_only")
    row = _row(client.get(STATUS).content.decode(), listed)
    assert '<td class="paused-state">paused</td>' in row
    assert "<form" not in row
    assert client.post(RESUME, {"connection": "postgres", "queue": listed}).status_code == 403
    assert client.post(PAUSE, {"connection": "postgres", "queue": listed, "post": "yes"}).status_code == 403
    assert listed in paused_queues("postgres")


@pytest.mark.parametrize("url", [PAUSE, RESUME])
def test_a_get_changes_nothing(url: str, listed: str) -> None:
    response = client_for("superuser").get(url, {"connection": "postgres", "queue": listed, "post": "yes"})
    assert response.status_code == 405
    assert listed in paused_queues("postgres")


def test_the_buttons_need_the_csrf_token(listed: str) -> None:
    client = client_for("superuser", csrf=True)
    assert client.post(RESUME, {"connection": "postgres", "queue": listed}).status_code == 403
    assert listed in paused_queues("postgres")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"connection": "postgres", "queue": "bad name"}, "queue name &#x27;bad name&#x27; is invalid"),
        ({"connection": "postgres"}, "queue name &#x27;&#x27; is invalid"),
        ({"connection": "nosuch", "queue": "ok"}, "is not configured"),
        ({"connection": "sync", "queue": "ok"}, "runs each job inside push()"),
    ],
)
def test_a_bad_target_is_refused_and_nothing_changes(fields: dict[str, str], message: str) -> None:
    client = client_for("superuser")
    response = client.post(PAUSE, {**fields, "post": "yes"}, follow=True)
    assert response.status_code == 200
    body = response.content.decode()
    assert "Nothing was changed: " in body and message in body
    assert "ok" not in paused_queues("postgres")


def test_the_sync_connection_has_no_button(listed: str) -> None:
    page = client_for("superuser").get(STATUS).content.decode()
    assert 'value="Resume"' in _row(page, listed)
    sync = page[page.index('data-connection="sync" data-queue="default"') :]
    assert "<form" not in sync[: sync.index("</tr>")]


def test_every_queue_of_a_connection_is_paused_after_a_confirmation_and_resumed_from_the_status_page() -> None:
    """The status page's "Pause every queue of postgres": a confirmation that says every queue, new ones included;
    then the page and the dashboard's header say so, until "Resume every queue" lifts it."""
    client = client_for("superuser")
    page = client.get(STATUS).content.decode()
    assert 'value="Pause every queue of postgres"' in page
    confirmation = client.post(PAUSE, {"connection": "postgres", "queue": "*"})
    assert confirmation.status_code == 200
    assert "pause <strong>every queue</strong> of connection" in confirmation.content.decode()
    assert not all_paused("postgres")  # the confirmation page changes nothing
    try:
        done = client.post(PAUSE, {"connection": "postgres", "queue": "*", "post": "yes"})
        assert (done.status_code, done["Location"]) == (302, STATUS)
        assert all_paused("postgres")
        page = client.get(STATUS).content.decode()
        assert "Every queue of connection postgres paused" in page
        assert "Every queue of postgres is paused, new ones included." in page
        assert 'value="Resume every queue of postgres"' in page
        dashboard = client.get(reverse("admin:kinetis_queue_failedjob_dashboard", args=["postgres"])).content.decode()
        assert 'id="dashboard-all-paused"' in dashboard and 'value="Resume every queue"' in dashboard
        assert client.post(RESUME, {"connection": "postgres", "queue": "*"}).status_code == 302
        assert not all_paused("postgres")
    finally:
        resume("*", "postgres")


def test_view_only_staff_cannot_pause_every_queue() -> None:
    client = client_for("view_only")
    assert 'value="Pause every queue' not in client.get(STATUS).content.decode()
    assert client.post(PAUSE, {"connection": "postgres", "queue": "*", "post": "yes"}).status_code == 403
    assert not all_paused("postgres")
