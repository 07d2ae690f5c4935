"""Metrics, traces, the correlation id and structured logs (kinetis_queue/observability), on the SQLite and Redis
connections: what each records, that a retry and a job's own pushes join one trace, and that no argument value
appears in any label, attribute or record."""

from __future__ import annotations

import io
import json
import logging
import socket
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client, override_settings

from kinetis_queue import JobContext, queues
from kinetis_queue.observability import correlation, setup
from kinetis_queue.observability.logs import JsonFormatter
from kinetis_queue.worker import Worker
from tests import jobs
from tests.settings import KINETIS_QUEUE

pytest.importorskip("prometheus_client")
pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import REGISTRY

EXPORTER = InMemorySpanExporter()
if not isinstance(trace.get_tracer_provider(), TracerProvider):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(provider)
else:  # pragma: no cover - another module set it first
    trace.get_tracer_provider().add_span_processor(SimpleSpanProcessor(EXPORTER))  # type: ignore[attr-defined]

SECRET = "s3cret-value-42"


@pytest.fixture
def observed() -> Iterator[None]:
    switches = {"METRICS": True, "TRACING": True, "JOB_LOG": True, "ENDPOINTS": {"ALLOW": ["127.0.0.1"]}}
    with override_settings(KINETIS_QUEUE={**KINETIS_QUEUE, **switches}):
        EXPORTER.clear()
        yield


def _run(queue_name: str, n: int = 1, **worker: Any) -> None:
    runner = Worker(queues["sqlite"], recorder=None, **worker)
    try:
        for _ in range(n):
            assert runner.process_next(5, [queue_name]) is True
    finally:
        runner.close()


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_metrics_count_pushes_and_deliveries_by_outcome_with_a_duration(observed: None, queue_name: str) -> None:
    labels = {"connection": "sqlite", "queue": queue_name, "job": "tests.jobs.Fails"}
    queues["sqlite"].push(jobs.Fails("x", token=SECRET), queue=queue_name, max_attempts=2)

    _run(queue_name, 2, retry_base_delay=0)

    assert _sample("kinetis_queue_pushed_total", **labels) == 1
    assert _sample("kinetis_queue_jobs_total", **labels, outcome="released") == 1
    assert _sample("kinetis_queue_jobs_total", **labels, outcome="failed") == 1
    assert _sample("kinetis_queue_job_duration_seconds_count", **labels) == 2
    page = Client().get("/queue/metrics/").content.decode()
    labelled = f'connection="sqlite",job="tests.jobs.Fails",outcome="failed",queue="{queue_name}"'
    assert f"kinetis_queue_jobs_total{{{labelled}}} 1.0" in page
    assert "kinetis_queue_queue_depth" in page and SECRET not in page


def test_the_metrics_view_is_off_without_metrics() -> None:
    assert Client().get("/queue/metrics/").status_code == 404


def test_queue_work_serves_its_metrics_on_a_port_and_refuses_one_without_metrics(observed: None) -> None:
    from kinetis_queue.observability.metrics import start_server

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    start_server(port)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert "kinetis_queue_jobs_total" in body or "kinetis_queue_pushed" in body
    with override_settings(KINETIS_QUEUE=KINETIS_QUEUE), pytest.raises(CommandError, match="--metrics-port needs"):
        call_command("queue_work", "--connection=sqlite", "--once", "--metrics-port=1")


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_push_and_its_attempts_share_a_trace_and_a_retry_is_another_child(observed: None, queue_name: str) -> None:
    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("request") as request:
        queues["sqlite"].push(jobs.Fails("x", token=SECRET), queue=queue_name, max_attempts=2)
    _run(queue_name, 2, retry_base_delay=0)

    spans = EXPORTER.get_finished_spans()
    [publish] = [s for s in spans if s.name == f"{queue_name} publish"]
    attempts = [s for s in spans if s.name == f"{queue_name} process"]
    assert publish.parent is not None and publish.parent.span_id == request.get_span_context().span_id
    assert publish.kind == trace.SpanKind.PRODUCER
    assert [a.attributes["kinetis_queue.attempt"] for a in attempts] == [1, 2]
    for attempt in attempts:
        assert attempt.kind == trace.SpanKind.CONSUMER
        assert attempt.context.trace_id == request.get_span_context().trace_id
        assert attempt.parent is not None and attempt.parent.span_id == publish.context.span_id
        assert [link.context.span_id for link in attempt.links] == [publish.context.span_id]
    assert attempts[-1].attributes["kinetis_queue.outcome"] == "failed"
    assert attempts[-1].status.status_code == trace.StatusCode.ERROR
    assert SECRET not in json.dumps([dict(s.attributes or {}) for s in spans])


def test_a_job_pushing_another_one_makes_it_a_child_of_its_attempt(observed: None, queue_name: str) -> None:
    def push_child(context: JobContext) -> None:
        queues["sqlite"].push(jobs.Records("child"), queue=queue_name)

    jobs.CALLBACK[:] = [push_child]
    queues["sqlite"].push(jobs.CallsBack(), queue=queue_name)
    _run(queue_name, 2)

    spans = EXPORTER.get_finished_spans()
    first_attempt = next(
        s
        for s in spans
        if s.name == f"{queue_name} process" and s.attributes["kinetis_queue.job_class"] == "tests.jobs.CallsBack"
    )
    child_publish = [
        s
        for s in spans
        if s.name == f"{queue_name} publish"
        and s.parent is not None
        and s.parent.span_id == first_attempt.context.span_id
    ]
    assert len(child_publish) == 1


def test_the_correlation_id_travels_from_the_request_to_the_job_and_its_pushes(
    queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    seen: dict[str, Any] = {}

    def push_child(context: JobContext) -> None:
        seen["inside"] = correlation.current()
        queues["sqlite"].push(jobs.Records("child"), queue=queue_name)

    def view(request: Any) -> Any:
        from django.http import HttpResponse

        queues["sqlite"].push(jobs.CallsBack(), queue=queue_name)
        return HttpResponse("ok")

    jobs.CALLBACK[:] = [push_child]
    request = type("Request", (), {"META": {"HTTP_X_REQUEST_ID": "req-123"}})()
    response = correlation.CorrelationMiddleware(view)(request)
    assert response["X-Request-ID"] == "req-123" and correlation.current() is None

    with caplog.at_level(logging.INFO, logger="kinetis_queue"):
        _run(queue_name, 2)
    assert seen["inside"] == "req-123"
    records = [r for r in caplog.records if getattr(r, "job_id", None)]
    assert records and {getattr(r, "correlation_id", None) for r in records} == {"req-123"}  # the child's too


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_job_log_writes_one_json_record_per_delivery_without_argument_values(observed: None, queue_name: str) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("kinetis_queue.jobs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        queues["sqlite"].push(jobs.Fails("x", token=SECRET), queue=queue_name, max_attempts=1)
        _run(queue_name)
    finally:
        logger.removeHandler(handler)
    [line] = stream.getvalue().splitlines()
    record = json.loads(line)
    assert (record["logger"], record["job_class"], record["queue"], record["attempt"], record["outcome"]) == (
        "kinetis_queue.jobs",
        "tests.jobs.Fails",
        queue_name,
        1,
        "failed",
    )
    assert record["error"] == "RuntimeError" and record["duration"] >= 0
    assert SECRET not in line


def test_a_switch_whose_library_is_missing_is_check_e008(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(setup.NEEDS, "METRICS", ("kinetis_queue_no_such_library", "metrics"))
    with override_settings(KINETIS_QUEUE={**KINETIS_QUEUE, "METRICS": True}):
        messages = [m for m in run_checks() if m.id == "kinetis_queue.E008"]
    assert [m.msg for m in messages] == [
        "KINETIS_QUEUE['METRICS'] needs kinetis_queue_no_such_library: pip install 'kinetis-queue[metrics]'"
    ]


API_ONLY = """
import django
django.setup()
from datetime import UTC, datetime
from opentelemetry import trace
from kinetis_queue.contracts import QueuedJob
from kinetis_queue.observability import tracing

assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
def job(metadata):
    return QueuedJob("j1", "q", "tests.jobs.Records", {}, 1, None, datetime.now(UTC), metadata)
class Connectionless:
    connection = None
queue = Connectionless()
hooks = tracing.TracingHooks()
print(tracing.push_metadata(queue, "q", "tests.jobs.Records"))
plain = job({})
hooks.started(plain)
print(tracing.push_metadata(queue, "q", "tests.jobs.Records"), len(hooks._spans))
hooks.ended(plain)
traced = job({tracing.TRACE_KEY: {"traceparent": "00-%s-%s-01"}})
hooks.started(traced)
print(tracing.push_metadata(queue, "q", "tests.jobs.Records"))
hooks.ended(traced)
print(tracing.push_metadata(queue, "q", "tests.jobs.Records"), len(hooks._spans))
"""


def test_with_the_api_alone_a_job_passes_on_the_trace_it_came_with_and_makes_none() -> None:
    """No SDK (a child process: this one has one): nothing is carried or kept, except a trace that came."""
    import subprocess
    import sys

    trace_id, span_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    script = API_ONLY % (trace_id, span_id)
    env = {"DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": ".", "PATH": ""}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    nothing, during_plain, during_traced, after = result.stdout.splitlines()
    assert nothing == "{}" and during_plain == "{} 0" and after == "{} 0"
    assert f"00-{trace_id}-{span_id}-01" in during_traced


def test_the_children_of_queue_work_processes_count_through_shared_files_the_supervisor_sums(
    queue_name: str, tmp_path: Any
) -> None:
    """--processes with --metrics-port: each child (PROMETHEUS_MULTIPROC_DIR) counts per delivery through
    prometheus_client's own collectors; the supervisor's port serves their sum."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from tests.support.helpers import wait_until

    root = Path(__file__).resolve().parents[2]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "KINETIS_TESTS_SUBPROCESS": "1",
        "KINETIS_TESTS_METRICS": "1",
        "PYTHONPATH": str(root),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    queues["redis"].push_many([jobs.Records(SECRET) for _ in range(20)], queue=queue_name)
    command = [sys.executable, "-m", "django", "queue_work", "--settings=tests.settings", "--connection=redis"]
    worker = subprocess.Popen(
        [*command, f"--queue={queue_name}", "--processes=2", f"--metrics-port={port}", "-v", "0"], env=env, cwd=root
    )
    labels = f'connection="redis",job="tests.jobs.Records",outcome="succeeded",queue="{queue_name}"'

    def counted() -> float:
        try:
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        except OSError:
            return 0.0
        assert SECRET not in body
        line = next((row for row in body.splitlines() if row.startswith(f"kinetis_queue_jobs_total{{{labels}}}")), "")
        return float(line.rsplit(" ", 1)[1]) if line else 0.0

    try:
        wait_until(lambda: counted() == 20, timeout=60)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
