"""The health and metrics views as anyone reaching the site meets them (issue 27, item 3): no store error
text to an untrusted caller, metrics closed until ENDPOINTS opens them, one computation per window (the
cached answer reads and writes nothing), and each view mountable on its own."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.db import connections
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import path

from kinetis_queue import conf
from kinetis_queue.contracts import Queue, QueueStats
from kinetis_queue.exceptions import QueueConfigurationError
from kinetis_queue.observability import views
from tests.support.backends import Backend
from tests.support.helpers import connections_only

TOKEN = "t0ken-for-the-scraper-only"
#: The views mounted apart, as a project may: health for the probes, metrics on an internal path.
urlpatterns = [path("healthz/", views.health), path("internal/prometheus/", views.metrics)]
#: What a store's error names and an untrusted caller must not read.
ADDRESS = "127.0.0.1"
WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


def _also(**top: Any) -> Any:
    """KINETIS_QUEUE as now in force, with ``top``'s keys set: for the metrics tests, the default connection
    alone (the view's depths read every queue of every connection: see connections_only)."""
    if top.get("METRICS"):
        return connections_only(**top)
    return override_settings(KINETIS_QUEUE={**settings.KINETIS_QUEUE, **top})


@pytest.fixture(autouse=True)
def _fresh_answers() -> Iterator[None]:
    views.ANSWERS.clear()
    yield
    views.ANSWERS.clear()


@pytest.fixture
def unreachable(request: pytest.FixtureRequest) -> Iterator[str]:
    """A connection whose store does not answer: an SQL database alias pointed at a closed port, or a
    connection "down" whose URL is. Yields the connection's name."""
    kind: str = request.param
    if kind in ("postgres", "mariadb"):
        database = connections[kind]
        port = database.settings_dict["PORT"]
        database.close()
        database.settings_dict["PORT"] = "9"
        try:
            yield kind
        finally:
            database.close()
            database.settings_dict["PORT"] = port
        return
    down = {
        "redis": {"BACKEND": "redis", "URL": f"redis://kq-user:pw@{ADDRESS}:9/0", "SOCKET_TIMEOUT": 1},
        "sqs": {"BACKEND": "sqs", "REGION": "us-east-1", "ENDPOINT_URL": f"http://{ADDRESS}:9"},
        "rabbitmq": {"BACKEND": "rabbitmq", "URL": f"amqp://guest:guest@{ADDRESS}:9//"},
    }[kind]
    with _also(CONNECTIONS={**settings.KINETIS_QUEUE["CONNECTIONS"], "down": down}):
        yield "down"


@pytest.mark.parametrize("unreachable", ["postgres", "mariadb", "redis", "sqs", "rabbitmq"], indirect=True)
@pytest.mark.logs_errors("django.request")
def test_an_untrusted_health_answer_gives_reason_codes_and_no_store_error_text(unreachable: str) -> None:
    url = f"/queue/health/?connection={unreachable}&workers=0"
    anonymous = Client().get(url)
    assert anonymous.status_code == 503
    assert anonymous.json() == {
        "status": "failing",
        "connections": [{"connection": unreachable, "healthy": False, "reasons": ["store_unreachable"]}],
    }
    body = anonymous.content.decode()
    assert ADDRESS not in body and "port" not in body and "user" not in body and "guest" not in body
    with _also(ENDPOINTS={"TOKEN": TOKEN}):
        trusted = Client().get(url, HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert trusted.status_code == 503
    [details] = trusted.json()["connections"]
    assert details["reasons"] == ["store_unreachable"]
    assert details["problems"][0].startswith("the store does not answer: ")  # the text: to the trusted only


@pytest.mark.logs_errors("django.request")
def test_an_untrusted_health_answer_to_a_bad_setting_is_its_code_alone() -> None:
    with _also(ENDPOINTS={"TOKEN": "short"}):
        answer = Client().get("/queue/health/", HTTP_AUTHORIZATION="Bearer short")
    assert (answer.status_code, answer.json()) == (503, {"status": "failing", "reasons": ["configuration"]})
    assert Client().get("/queue/health/?connection=nosuch").json() == {
        "status": "failing",
        "reasons": ["unknown_connection"],
    }


def test_metrics_are_closed_by_default_and_open_to_the_configured_token_or_address() -> None:
    client = Client()
    with _also(METRICS=True):
        refused = client.get("/queue/metrics/")
        assert (refused.status_code, refused.content.decode()) == (403, views.FORBIDDEN)
        assert client.get("/queue/metrics/", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 403
    with _also(METRICS=True, ENDPOINTS={"TOKEN": TOKEN}):
        assert client.get("/queue/metrics/").status_code == 403
        assert client.get("/queue/metrics/", HTTP_AUTHORIZATION="Bearer not-the-token-at-all").status_code == 403
        opened = client.get("/queue/metrics/", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        assert opened.status_code == 200 and b"kinetis_queue_queue_depth" in opened.content
    with _also(METRICS=True, ENDPOINTS={"ALLOW": ["10.0.0.0/8", "2001:db8::/32"]}):
        assert client.get("/queue/metrics/", REMOTE_ADDR="192.168.1.5").status_code == 403
        assert client.get("/queue/metrics/", REMOTE_ADDR="10.1.2.3").status_code == 200
        assert client.get("/queue/metrics/", REMOTE_ADDR="::ffff:10.1.2.3").status_code == 200
        assert client.get("/queue/metrics/", REMOTE_ADDR="2001:db8::7").status_code == 200
    with _also(ENDPOINTS={"TOKEN": TOKEN}):  # METRICS off: there is nothing to open
        assert client.get("/queue/metrics/", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 404


@pytest.mark.logs_errors("django.request")  # a row whose store reads as unhealthy answers 503, logged
def test_two_health_gets_within_the_window_compute_once_and_the_second_reads_nothing(
    connection: Queue, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    stats = type(connection).stats

    def counted(self: Queue, queue: str) -> QueueStats:
        reads.append(queue)
        return stats(self, queue)

    monkeypatch.setattr(type(connection), "stats", counted)  # the real reading, counted
    url = f"/queue/health/?connection={backend.connection}&workers=0"
    with CaptureQueriesContext(connections["default"]) as first:
        computed = Client().get(url)
    assert reads and len(first) > 0  # the stores and the database were read
    done = len(reads)
    with CaptureQueriesContext(connections["default"]) as second:
        again = Client().get(url)
    assert (again.status_code, again.json()) == (computed.status_code, computed.json())
    assert (len(reads), len(second)) == (done, 0)  # one computation: no store read, no query, no write


def test_a_metrics_answer_is_computed_once_per_window_and_writes_nothing() -> None:
    client = Client()
    with _also(METRICS=True, ENDPOINTS={"TOKEN": TOKEN, "CACHE_SECONDS": 300}):
        with CaptureQueriesContext(connections["default"]) as first:
            assert client.get("/queue/metrics/", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200
        assert len(first) > 0
        assert [q["sql"] for q in first.captured_queries if q["sql"].lstrip().upper().startswith(WRITES)] == []
        with CaptureQueriesContext(connections["default"]) as second:
            assert client.get("/queue/metrics/", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200
        assert len(second) == 0


@pytest.mark.urls(__name__)
def test_each_view_mounts_on_a_path_of_its_own() -> None:
    client = Client()
    assert client.get("/healthz/?connection=sqlite&workers=0").status_code == 200
    with _also(METRICS=True, ENDPOINTS={"ALLOW": ["127.0.0.1"]}):
        assert client.get("/internal/prometheus/").status_code == 200
    assert client.get("/queue/health/").status_code == 404


@pytest.mark.parametrize(
    ("endpoints", "message"),
    [
        ({"TOKEN": "short"}, "['ENDPOINTS']['TOKEN'] must be a string of at least 16 printable ASCII characters"),
        ({"TOKEN": "sixteen chars or more"}, "['ENDPOINTS']['TOKEN'] must not contain a space"),
        ({"ALLOW": "10.0.0.0/8"}, "['ENDPOINTS']['ALLOW'] must be a list of client addresses or networks"),
        ({"ALLOW": ["10.0.0.0/8", "10.0.0.300"]}, "['ENDPOINTS']['ALLOW'][1] must be an IP address or network"),
        ({"CACHE_SECONDS": 0}, "['ENDPOINTS']['CACHE_SECONDS'] must be"),
        ({"OPEN": True}, "['ENDPOINTS']['OPEN'] is not a known key (known: ALLOW, CACHE_SECONDS, TOKEN)"),
        ([], "['ENDPOINTS'] must be a dict"),
    ],
)
def test_a_bad_endpoints_setting_is_refused_naming_its_key(endpoints: Any, message: str) -> None:
    with _also(ENDPOINTS=endpoints), pytest.raises(QueueConfigurationError, match=re.escape(message)):
        conf.load()
