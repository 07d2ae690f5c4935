"""A delivery's hooks and a worker's threads, on every backend that stores jobs (issue 27, items 5, 6, 18):
every lifecycle hook fires once on every path, the watchdog's timeout included; an observer hook that raises
(or meets a malformed trace carrier) never changes a job's outcome; and whatever a worker starts ends when its
caller is done with it."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from kinetis_queue.contracts import Queue, QueuedJob
from kinetis_queue.control.hooks import view_of
from kinetis_queue.hooks import DeliveryHooks, HookChain
from kinetis_queue.middleware import worker_hooks
from kinetis_queue.observability import correlation
from kinetis_queue.observability.tracing import TRACE_KEY, TracingHooks
from kinetis_queue.outcomes import JobOutcome, JobReport
from kinetis_queue.worker import ExitReason, Worker
from kinetis_queue.worker.job_timeout import TIMEOUT_KEY
from tests import concurrency_jobs as cj
from tests import jobs
from tests.counting_middleware import provided_metadata
from tests.settings import KINETIS_QUEUE
from tests.support.helpers import in_thread, wait_until

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

pytestmark = pytest.mark.trait("stores_jobs")

EXPORTER = InMemorySpanExporter()
if not isinstance(trace.get_tracer_provider(), TracerProvider):
    _provider = TracerProvider()
    _provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
    trace.set_tracer_provider(_provider)
else:  # pragma: no cover - another test module set it first
    trace.get_tracer_provider().add_span_processor(SimpleSpanProcessor(EXPORTER))  # type: ignore[attr-defined]


class Recorder(DeliveryHooks):
    """Every observer call, in order: (method, job id[, outcome])."""

    wants_reports = True

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def started(self, job: QueuedJob) -> None:
        self.calls.append(("started", job.id))

    def ended(self, job: QueuedJob) -> None:
        self.calls.append(("ended", job.id))

    def reported(self, job: QueuedJob, report: JobReport) -> None:
        self.calls.append(("reported", job.id, report.outcome))


class Raising(DeliveryHooks):
    """An observer whose every method raises (a broken exporter, say)."""

    wants_reports = True

    def started(self, job: QueuedJob) -> None:
        raise RuntimeError("started")

    def ended(self, job: QueuedJob) -> None:
        raise RuntimeError("ended")

    def reported(self, job: QueuedJob, report: JobReport) -> None:
        raise RuntimeError("reported")


@pytest.fixture
def traced() -> Iterator[None]:
    """TRACING on (the worker's default hooks then trace; pushes carry the trace context)."""
    with override_settings(KINETIS_QUEUE={**KINETIS_QUEUE, "TRACING": True}):
        EXPORTER.clear()
        yield


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    cj.reset()
    yield
    cj.RELEASE.set()  # a job still waiting in an abandoned thread ends now
    cj.HOLD.set()


def names(outcomes: list[tuple[str, dict[str, Any]]]) -> list[str]:
    return [name for name, _ in outcomes]


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.ERROR]


# -- item 5: the watchdog's timeout ends the delivery's hooks ----------------------------------------------


def test_a_job_settled_by_the_timeout_watchdog_ends_its_hooks_and_its_span_once(
    connection: Queue, queue_name: str, outcomes: list, traced: None, caplog: pytest.LogCaptureFixture
) -> None:
    """``--concurrency 4 --timeout 1``: the watchdog settles the attempt while handle() still runs; the
    delivery is then ended (the registry's "running" entry dropped, the span ended) once, and the thread
    that ends later calls no hook again."""
    with trace.get_tracer("tests").start_as_current_span("request"):
        job_id = connection.push(cj.WaitsForRelease("w"), queue=queue_name, max_attempts=1)
    recorder = Recorder()
    worker = Worker(connection, concurrency=4, job_timeout=1, hooks=HookChain([worker_hooks(), recorder]))
    try:
        assert worker.run(5, [queue_name], once=True) is ExitReason.COMPLETED
        assert cj.WAITING.is_set() and cj.STARTED == []  # settled while handle() still waits
        assert names(outcomes) == ["job_failed_permanently"]
        assert recorder.calls == [("started", job_id), ("reported", job_id, JobOutcome.FAILED), ("ended", job_id)]
        (span,) = [s for s in EXPORTER.get_finished_spans() if s.name == f"{queue_name} process"]
        assert span.attributes is not None and span.attributes["messaging.message.id"] == job_id
        assert span.attributes["kinetis_queue.outcome"] == JobOutcome.FAILED.value
        cj.RELEASE.set()
        wait_until(lambda: any("its result is discarded" in r.getMessage() for r in caplog.records))
    finally:
        worker.close()
    assert recorder.calls == [("started", job_id), ("reported", job_id, JobOutcome.FAILED), ("ended", job_id)]
    # The span's context is not detached in the watchdog's thread, where it was never attached.
    assert [r.getMessage() for r in caplog.records if r.name.startswith("opentelemetry")] == []


# -- item 6: observers never change an outcome ----------------------------------------------------------


def test_a_malformed_trace_carrier_neither_fails_the_job_nor_logs_an_error(
    connection: Queue,
    queue_name: str,
    outcomes: list,
    traced: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def malformed(job_class: str) -> dict[str, Any]:
        return {TRACE_KEY: {"traceparent": 12, "baggage": 5}}

    with provided_metadata(malformed):
        connection.push(jobs.Records("carried"), queue=queue_name, max_attempts=1)
        worker = Worker(connection)
        try:
            assert any(isinstance(hook, TracingHooks) for hook in getattr(worker.hooks, "hooks", ()))
            assert worker.process_next(5, [queue_name]) is True
        finally:
            worker.close()
    assert names(outcomes) == ["job_succeeded"]
    assert [call[1] for call in jobs.CALLS] == ["carried"]
    assert errors(caplog) == []


@pytest.mark.parametrize("chained", [True, False], ids=["in-a-chain", "alone"])
def test_an_observer_hook_that_raises_is_logged_once_and_the_outcomes_are_unchanged(
    connection: Queue, queue_name: str, outcomes: list, caplog: pytest.LogCaptureFixture, chained: bool
) -> None:
    """started(), ended() and reported() raise on every job: both jobs succeed, the other hooks still see
    everything, and each failing method is logged once, by class name (never its text)."""
    first = connection.push(jobs.Records("one"), queue=queue_name, max_attempts=1)
    second = connection.push(jobs.Records("two"), queue=queue_name, max_attempts=1)
    recorder = Recorder()
    chain: DeliveryHooks = HookChain([Raising(), recorder]) if chained else Raising()
    worker = Worker(connection, hooks=chain)
    try:
        assert worker.process_next(5, [queue_name]) is True
        assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()
    assert names(outcomes) == ["job_succeeded", "job_succeeded"]
    assert [call[1] for call in jobs.CALLS] == ["one", "two"]
    if chained:
        assert recorder.calls == [
            (method, job_id, *extra)
            for job_id in (first, second)
            for method, *extra in (("started",), ("reported", JobOutcome.SUCCEEDED), ("ended",))
        ]
    logged = errors(caplog)
    assert len(logged) == 3
    for method in ("started", "ended", "reported"):
        (line,) = [line for line in logged if f"{method}()" in line]
        assert "Raising" in line and "RuntimeError" in line and "unchanged" in line
    assert all(record.exc_info is None for record in caplog.records)


class SignalledWhileStarting(DeliveryHooks):
    """A hook whose start() is slow enough for an operator's SIGTERM to arrive (it sends one itself)."""

    def start(self, queue: Queue) -> None:
        os.kill(os.getpid(), signal.SIGTERM)


def test_a_sigterm_while_the_hooks_start_is_a_clean_stop(connection: Queue, queue_name: str) -> None:
    """The worker's handlers are in place before its hooks start: a heartbeat file is fresh from the first
    hook on, and a SIGTERM then stopped run() with the process's default action (exit -15, fresh-clone run
    ci3 of the last session, test_worker_liveness)."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are installed from the main thread only")
    connection.push(jobs.Records("never"), queue=queue_name, max_attempts=1)
    reached: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: reached.append(signum))
    try:
        with Worker(connection, hooks=SignalledWhileStarting()) as worker:
            reason = worker.run(1, [queue_name], stop_when_empty=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert reached == []  # the worker's handler took it, not the one before run()
    assert reason is ExitReason.SHUTDOWN
    assert jobs.CALLS == []  # stopped before it reserved anything


# -- item 18: a worker's threads end when its caller is done with it -------------------------------------


def _control_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "kinetis-queue-control"]


def test_a_worker_driven_by_process_next_stops_its_background_refresh_when_its_with_block_ends(
    connection: Queue, queue_name: str, outcomes: list
) -> None:
    connection.push(jobs.Records("one"), queue=queue_name)
    assert connection.connection is not None
    view = view_of(connection.connection)
    with Worker(connection) as worker:
        assert worker.process_next(5, [queue_name]) is True
        assert view.refreshed_in_background and _control_threads()
    assert not view.refreshed_in_background
    assert _control_threads() == []
    assert names(outcomes) == ["job_succeeded"]
    worker.close()  # once more: nothing left to do, nothing raised


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_the_thread_of_a_timed_out_job_runs_its_next_job_without_what_the_first_one_set(
    connection: Queue, queue_name: str, outcomes: list, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Job "a" (its own 1 s limit, a correlation id) times out and its pool thread is abandoned; once it
    ends, that thread (the other one is held by "c") runs "b", pushed with no correlation id: "b" must not
    see "a"'s, which the watchdog's ended() could not take back from "a"'s thread."""

    def timed(job_class: str) -> dict[str, Any]:
        if job_class.endswith("WaitsForRelease"):
            return {TIMEOUT_KEY: 1, correlation.METADATA_KEY: "corr-a"}
        return {}

    with provided_metadata(timed):
        connection.push(cj.WaitsForRelease("a"), queue=queue_name, max_attempts=1)
        connection.push(cj.HoldsUntil("c"), queue=queue_name)

        worker = Worker(connection, concurrency=2)

        def then() -> None:
            try:
                wait_until(lambda: names(outcomes) == ["job_failed_permanently"])  # "a" settled by the watchdog
                cj.RELEASE.set()
                wait_until(lambda: "a" in cj.STARTED)  # "a"'s thread is free again ("c" holds the other)
                connection.push(cj.RecordsCorrelation("b"), queue=queue_name)
                wait_until(lambda: any(label.startswith("b:") for label in cj.STARTED))
            finally:
                cj.HOLD.set()
                cj.RELEASE.set()
                if not any(label.startswith("b:") for label in cj.STARTED):
                    worker.stop()  # a failed step: end the run rather than hang it

        helper = in_thread(then)
        try:
            assert worker.run(5, [queue_name], max_jobs=3) is ExitReason.MAX_JOBS
        finally:
            worker.close()
        helper.join()
    assert sorted(cj.STARTED) == ["a", "b:None", "c"]
