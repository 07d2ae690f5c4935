"""The dashboard (kinetis_queue/dashboard) through Django's test client: who sees what, the figures against
``status.collect()`` and the history for a known state, the SVG charts, no argument value anywhere, the
operations (POST, CSRF, the failed-jobs admin's permissions, a confirmation first), the live part alone and
the page without JavaScript. The same state in a real browser: tests/operator/browser/test_dashboard_pages.py.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client, override_settings
from django.urls import reverse

from kinetis_queue import queues
from kinetis_queue.contracts import QueuedJob
from kinetis_queue.control import paused_queues, resume
from kinetis_queue.dashboard import charts
from kinetis_queue.models import FailedJob, RestartMarker
from kinetis_queue.observability import status
from kinetis_queue.observability.models import HistoryMinute, WorkerRecord
from kinetis_queue.observability.tally import BUCKETS
from kinetis_queue.worker.restart import DatabaseRestartMarker
from tests import jobs
from tests.operator.test_admin import SECRET, STATUS_SETTINGS, client_for

#: A connection of its own (SQL, the default database): the history, registry and failed rows these tests
#: write under its name are theirs alone. A long visibility timeout: a reserved job stays reserved.
CONNECTION = "dash"
SETTINGS: dict[str, Any] = {
    **STATUS_SETTINGS,
    "HISTORY": False,  # as in tests/settings.py: the history rows are the tests' own
    "CONNECTIONS": {
        **STATUS_SETTINGS["CONNECTIONS"],
        CONNECTION: {"BACKEND": "sql", "DATABASE": "default", "VISIBILITY_TIMEOUT": 3600},
        "browse": {"BACKEND": "sql", "DATABASE": "default", "VISIBILITY_TIMEOUT": 3600},
    },
}
#: A plain (not Sensitive) argument: the dashboard shows no argument at all, so not this one either.
PLAIN_ARGUMENT = "plain-argument-value-on-the-dashboard"
SLOW_JOB = "tests.jobs.Records"
RUNNING_JOB_ID = "running0job0id0of0the0dashboard"


@dataclass(frozen=True)
class State:
    """What known_state() wrote."""

    connection: str
    queue: str
    records: list[FailedJob]
    #: (Unix minute, deliveries, failed) of the history rows written.
    minutes: list[tuple[int, int, int]]
    #: The delivery left reserved (clean() acks it: clear() takes only the waiting jobs).
    reserved: QueuedJob


def known_state(connection: str, queue_name: str) -> State:
    """3 ready jobs, 1 delayed, 1 reserved; 2 failed records; two minutes of history; an alive worker
    running a job and a gone one. Every job and record carries PLAIN_ARGUMENT and SECRET."""
    queue = queues[connection]
    for _ in range(4):
        queue.push(jobs.Records(PLAIN_ARGUMENT), queue=queue_name)
    queue.push(jobs.Records(PLAIN_ARGUMENT), queue=queue_name, delay=3600)
    reserved = queue.pop(5, [queue_name])  # reserved, not acked: 3 ready are left
    assert reserved is not None
    records = [
        FailedJob.objects.create(
            connection=connection,
            queue=queue_name,
            job_id=uuid.uuid4().hex,
            job_class="tests.jobs.Fails",
            args=json.dumps({"label": PLAIN_ARGUMENT, "token": SECRET}),
            attempts=3,
            max_attempts=3,
            exception_class="builtins.RuntimeError",
            exception_message=f"deliberate failure {PLAIN_ARGUMENT}",
            traceback="Traceback (most recent call last):\nRuntimeError: deliberate failure",
        )
        for _ in range(2)
    ]
    now = time.time()
    minute = int(now // 60)
    buckets = [0] * (len(BUCKETS) + 1)
    buckets[BUCKETS.index(0.5)] = 4  # 4 deliveries between 0.25 s and 0.5 s
    buckets[BUCKETS.index(2.5)] = 1  # 1 between 1 s and 2.5 s
    rows = [(minute - 1, 4, 1, 0), (minute - 10, 4, 0, 1)]  # (minute, succeeded, failed, released)
    for at, succeeded, failed_, released in rows:
        HistoryMinute.objects.create(
            minute=at,
            source=uuid.uuid4().hex,
            connection=connection,
            queue=queue_name,
            job=SLOW_JOB,
            pushed=succeeded + failed_,
            succeeded=succeeded,
            failed=failed_,
            released=released,
            runtime=3.0,
            buckets=",".join(map(str, buckets)),
        )
    for pid, seen, running in ((101, now, [(RUNNING_JOB_ID, now - 30)]), (102, now - 120, [])):
        WorkerRecord.objects.create(
            id=uuid.uuid4().hex,
            host="dash-host",
            pid=pid,
            connection=connection,
            queues=queue_name,
            concurrency=2,
            started_at=now - 600,
            last_seen=seen,
            last_started=now - 30,
            running=json.dumps([{"id": i, "job": SLOW_JOB, "queue": queue_name, "started": s} for i, s in running]),
            processed=7,
            failed=1,
        )
    return State(connection, queue_name, records, [(m, s + f + r, f) for m, s, f, r in rows], reserved)


def clean(state: State) -> None:
    """Remove what known_state() wrote (and what the test added under its connection and queue)."""
    connection, queue_name = state.connection, state.queue
    queues[connection].ack(state.reserved)
    queues.clearable(connection).clear(queue_name)
    resume(queue_name, connection)
    FailedJob.objects.filter(connection=connection).delete()
    HistoryMinute.objects.filter(connection=connection).delete()
    WorkerRecord.objects.filter(connection=connection).delete()
    RestartMarker.objects.filter(connection=connection).delete()


@pytest.fixture
def state(queue_name: str) -> Iterator[State]:
    with override_settings(KINETIS_QUEUE=SETTINGS):
        made = known_state(CONNECTION, queue_name)
        try:
            yield made
        finally:
            clean(made)


URL = reverse("admin:kinetis_queue_failedjob_dashboard", args=[CONNECTION])
RESTART = reverse("admin:kinetis_queue_failedjob_dashboard_restart", args=[CONNECTION])
PAUSE = reverse("admin:kinetis_queue_failedjob_pause")


def _get(role: str, url: str = URL) -> str:
    response = client_for(role).get(url)
    assert response.status_code == 200
    return response.content.decode()


def _row(page: str, table: str, marker: str) -> str:
    part = page[page.index(f'id="{table}"') :]
    part = part[part.rindex("<tr", 0, part.index(marker)) :]
    return part[: part.index("</tr>")]


def _cells(row: str) -> list[str]:
    return [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]


# -- who sees what -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "expected"),
    [("anonymous", 302), ("non_staff", 302), ("staff_without_permission", 403), ("view_only", 200), ("full", 200)],
)
def test_who_may_see_the_page(role: str, expected: int, state: State) -> None:
    response = client_for(role).get(URL)
    assert response.status_code == expected
    if expected == 302:
        assert response["Location"].startswith(reverse("admin:login"))


def test_an_unknown_connection_is_not_found(state: State) -> None:
    assert (
        client_for("superuser").get(reverse("admin:kinetis_queue_failedjob_dashboard", args=["nope"])).status_code
        == 404
    )
    assert client_for("superuser").get("/admin/kinetis_queue/failedjob/dashboard/Bad-Name/").status_code == 404


@pytest.mark.parametrize("role", ["view_only", "full", "superuser"])
def test_no_argument_value_anywhere(role: str, state: State) -> None:
    for url in (URL, URL + "?live=1"):
        page = _get(role, url)
        assert PLAIN_ARGUMENT not in page and SECRET not in page
    if role != "view_only":
        retry = reverse("admin:kinetis_queue_failedjob_dashboard_retry", args=[CONNECTION, state.records[0].pk])
        page = _get(role, retry)
        assert "Are you sure you want to retry" in page
        assert PLAIN_ARGUMENT not in page and SECRET not in page


def test_view_only_staff_see_the_figures_and_no_operation(state: State) -> None:
    page = _get("view_only")
    assert f'data-queue="{state.queue}"' in page and 'id="dashboard-workers"' in page
    page = page[page.index('<div id="content"') :]  # the header's Log out form apart
    for operation in ("<form", "<button", 'type="submit"', "retry-link", "forget-link", "csrfmiddlewaretoken"):
        assert operation not in page, operation
    # Links to see more remain: the failed jobs (their list and each record), the chains and batches.
    assert 'id="dashboard-failed-link"' in page
    assert reverse("admin:kinetis_queue_failedjob_change", args=[state.records[0].pk]) in page
    assert 'id="dashboard-schedules-link"' not in page  # no "view" permission on the schedules


def test_a_superuser_sees_every_operation(state: State) -> None:
    page = _get("superuser")
    row = _row(page, "dashboard-queues", f'data-queue="{state.queue}"')
    assert 'value="Pause"' in row and f'name="next" value="{URL}"' in row
    assert 'id="restart-form"' in page
    assert page.count('class="button retry-link"') == 2 and page.count('class="button forget-link"') == 2
    assert 'id="dashboard-schedules-link"' in page and 'id="dashboard-workflows-link"' in page


def test_the_sync_connection_has_no_pause_or_restart(state: State) -> None:
    page = _get("superuser", reverse("admin:kinetis_queue_failedjob_dashboard", args=["sync"]))
    assert 'class="pause-form"' not in page and 'id="restart-form"' not in page


# -- the figures -----------------------------------------------------------------------------------------


def test_the_queue_figures_are_queue_status_figures(state: State) -> None:
    page = _get("view_only")
    (expected,) = status.collect(CONNECTION)
    shown = {q.queue for q in expected.queues}
    assert state.queue in shown
    for figures in expected.queues:
        s = figures.stats
        row = _cells(_row(page, "dashboard-queues", f'data-queue="{figures.queue}"'))
        assert row == [
            figures.queue,
            str(s.ready),
            str(s.delayed),
            str(s.reserved),
            str(figures.failed),
            "paused" if figures.paused else "no",
        ]
    ours = _cells(_row(page, "dashboard-queues", f'data-queue="{state.queue}"'))
    assert ours == [state.queue, "3", "1", "1", "2", "no"]


def test_the_charts_have_a_bar_per_minute_with_the_history_values(state: State) -> None:
    page = _get("view_only")
    for chart, column in (("chart-deliveries", 1), ("chart-failures", 2)):
        svg = page[page.index(f'id="{chart}"') :]
        svg = svg[svg.index("<svg") : svg.index("</svg>")]
        bars = dict(re.findall(r'<rect class="bar"[^>]*data-minute="(\d+)" data-value="(\d+)"', svg))
        assert len(bars) == 60
        written = {str(row[0]): str(row[column]) for row in state.minutes}
        assert {minute: value for minute, value in bars.items() if value != "0"} == {
            m: v for m, v in written.items() if v != "0"
        }
        assert f'data-total="{sum(int(v) for v in written.values())}"' in svg
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing from elsewhere
    assert "<script" not in page[page.index('id="dashboard-live"') :]  # the charts need no script


def test_the_slowest_job_classes(state: State) -> None:
    row = _cells(_row(_get("view_only"), "dashboard-slowest", SLOW_JOB))
    # 10 deliveries, 8 between 0.25 s and 0.5 s and 2 between 1 s and 2.5 s, interpolated within the bucket
    # as history.Counts.quantile() does: p50 = 0.25 + 0.25 * 5/8, p95 = 1 + 1.5 * 1.5/2.
    assert row == [SLOW_JOB, "10", "1", "0.406 s", "2.125 s"]


def test_running_jobs_and_workers(state: State) -> None:
    page = _get("view_only")
    running = _cells(_row(page, "dashboard-running", RUNNING_JOB_ID))
    assert running[:4] == [SLOW_JOB, RUNNING_JOB_ID, state.queue, "dash-host:101"]
    alive = _cells(_row(page, "dashboard-workers", "dash-host:101"))
    assert alive[:7] == ["dash-host:101", "alive", state.queue, "2", "1", "7", "1"]
    assert _cells(_row(page, "dashboard-workers", "dash-host:102"))[1] == "gone"


def test_the_failed_jobs_and_their_link(state: State) -> None:
    page = _get("view_only")
    assert "All 2 failed job(s) of this connection" in page
    href = reverse("admin:kinetis_queue_failedjob_changelist") + f"?connection={CONNECTION}"
    assert href in page
    listed = client_for("view_only").get(href).content.decode()
    assert all(f"/{record.pk}/change/" in listed for record in state.records)


# -- without JavaScript, and the live part --------------------------------------------------------------


def test_the_page_reads_without_javascript(state: State) -> None:
    page = _get("view_only")
    assert '<meta http-equiv="refresh"' not in page.lower()
    assert "<noscript>" in page and 'id="dashboard-reload"' in page
    assert 'src="/static/kinetis_queue/dashboard.js"' in page
    live = page[page.index('<div id="dashboard-live"') :]
    assert f'data-queue="{state.queue}"' in live and RUNNING_JOB_ID in live  # the data is in the HTML


def test_the_live_part_alone(state: State) -> None:
    response = client_for("view_only").get(URL, {"live": "1"})
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="dashboard-live"')
    assert "<html" not in body and f'data-queue="{state.queue}"' in body
    assert client_for("anonymous").get(URL, {"live": "1"}).status_code == 302


# -- the operations ---------------------------------------------------------------------------------------


def test_pause_from_the_dashboard_confirms_and_returns_there(state: State) -> None:
    client = client_for("superuser")
    asked = client.post(PAUSE, {"connection": CONNECTION, "queue": state.queue, "next": URL})
    body = asked.content.decode()
    assert "Are you sure you want to pause the queue" in body and f'name="next" value="{URL}"' in body
    assert f'href="{URL}" class="button cancel-link"' in body
    assert state.queue not in paused_queues(CONNECTION)
    done = client.post(PAUSE, {"connection": CONNECTION, "queue": state.queue, "post": "yes", "next": URL})
    assert (done.status_code, done["Location"]) == (302, URL)
    assert state.queue in paused_queues(CONNECTION)
    row = _row(client.get(URL).content.decode(), "dashboard-queues", f'data-queue="{state.queue}"')
    assert "paused" in _cells(row) and 'value="Resume"' in row


def test_next_never_leads_off_the_site(state: State) -> None:
    client = client_for("superuser")
    for wanted in ("https://evil.example/", "//evil.example/", "javascript:alert(1)"):
        done = client.post(PAUSE, {"connection": CONNECTION, "queue": state.queue, "post": "yes", "next": wanted})
        assert done["Location"] == reverse("admin:kinetis_queue_failedjob_status")
        resume(state.queue, CONNECTION)


def test_restart_confirms_then_moves_the_marker(state: State) -> None:
    client = client_for("superuser")
    before = DatabaseRestartMarker(CONNECTION).read()
    asked = client.post(RESTART)
    assert asked.status_code == 200 and "Are you sure you want to restart the workers" in asked.content.decode()
    assert DatabaseRestartMarker(CONNECTION).read() == before
    done = client.post(RESTART, {"post": "yes"})
    assert (done.status_code, done["Location"]) == (302, URL)
    assert DatabaseRestartMarker(CONNECTION).read() == before + 1
    assert "Restart requested for connection dash" in client.get(URL).content.decode()
    assert client.get(RESTART).status_code == 405  # a GET changes nothing


def test_retry_and_forget_from_the_dashboard_return_there(state: State) -> None:
    client = client_for("superuser")
    first, second = state.records
    page = client.get(reverse("admin:kinetis_queue_failedjob_dashboard_retry", args=[CONNECTION, first.pk]))
    assert f'name="next" value="{URL}"' in page.content.decode()
    assert FailedJob.objects.filter(pk=first.pk).exists()  # the confirmation changes nothing
    done = client.post(reverse("admin:kinetis_queue_failedjob_retry", args=[first.pk]), {"next": URL})
    assert (done.status_code, done["Location"]) == (302, URL)
    assert not FailedJob.objects.filter(pk=first.pk).exists()

    forget = reverse("admin:kinetis_queue_failedjob_forget", args=[second.pk])
    asked = client.get(forget, {"next": URL}).content.decode()
    assert f'name="next" value="{URL}"' in asked and f'href="{URL}" class="button cancel-link"' in asked
    done = client.post(forget, {"post": "yes", "next": URL})
    assert (done.status_code, done["Location"]) == (302, URL)
    assert not FailedJob.objects.filter(pk=second.pk).exists()


def test_forged_posts_without_the_permission_are_refused(state: State) -> None:
    client = client_for("view_only")
    record = state.records[0]
    refused = {
        RESTART: {"post": "yes"},
        PAUSE: {"connection": CONNECTION, "queue": state.queue, "post": "yes", "next": URL},
        reverse("admin:kinetis_queue_failedjob_retry", args=[record.pk]): {"next": URL},
        reverse("admin:kinetis_queue_failedjob_forget", args=[record.pk]): {"post": "yes", "next": URL},
    }
    before = DatabaseRestartMarker(CONNECTION).read()
    for url, data in refused.items():
        assert client.post(url, data).status_code == 403, url
    assert (
        client.get(reverse("admin:kinetis_queue_failedjob_dashboard_retry", args=[CONNECTION, record.pk])).status_code
        == 403
    )
    assert DatabaseRestartMarker(CONNECTION).read() == before
    assert state.queue not in paused_queues(CONNECTION)
    assert FailedJob.objects.filter(pk=record.pk).exists()


def test_csrf_is_enforced(state: State) -> None:
    client = client_for("superuser", csrf=True)
    before = DatabaseRestartMarker(CONNECTION).read()
    assert client.post(RESTART, {"post": "yes"}).status_code == 403
    assert client.post(PAUSE, {"connection": CONNECTION, "queue": state.queue, "post": "yes"}).status_code == 403
    assert DatabaseRestartMarker(CONNECTION).read() == before
    assert state.queue not in paused_queues(CONNECTION)
    # With the page's token, the same POST is accepted.
    page = client.get(URL).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token is not None
    asked = client.post(RESTART, {"csrfmiddlewaretoken": token.group(1)})
    assert asked.status_code == 200 and "Are you sure you want to restart" in asked.content.decode()


# -- how the dashboards are reached -----------------------------------------------------------------------


def test_the_status_page_and_the_app_index_link_each_dashboard(state: State) -> None:
    for url in (reverse("admin:kinetis_queue_failedjob_status"), reverse("admin:app_list", args=["kinetis_queue"])):
        page = _get("view_only", url)
        for name in SETTINGS["CONNECTIONS"]:
            assert reverse("admin:kinetis_queue_failedjob_dashboard", args=[name]) in page, (url, name)
    assert "Dashboard: dash" not in Client().get(reverse("admin:app_list", args=["kinetis_queue"])).content.decode()


# -- the charts alone -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("peak", "top"), [(0, 1), (1, 1), (2, 2), (3, 5), (7, 10), (11, 20), (120, 200), (500, 500)])
def test_the_scale_is_a_round_number_at_or_above_the_peak(peak: int, top: int) -> None:
    assert charts.scale_top(peak) == top


def test_a_chart_escapes_its_text_and_scales_its_bars() -> None:
    svg = str(charts.bar_chart([(100, 0), (101, 5), (102, 10)], label="<b>&", css_class="x"))
    assert "<b>&" not in svg and "&lt;b&gt;&amp;" in svg
    heights = [float(h) for h in re.findall(r'<rect class="bar"[^>]*height="([\d.]+)"', svg)]
    assert heights[0] == 0 and heights[2] == 2 * heights[1] > 0
    assert 'data-bars="3"' in svg and 'data-total="15"' in svg
    assert 'data-bars="0"' in str(charts.bar_chart([], label="none", css_class="x"))
