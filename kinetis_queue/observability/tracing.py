"""OpenTelemetry traces (``KINETIS_QUEUE["TRACING"] = True``, the ``otel`` extra: opentelemetry-api only).

- A push starts a PRODUCER span ``<queue> publish`` and carries its W3C trace context in the envelope's
  metadata (``kinetis_queue.trace``), with the correlation id of the current request or job
  (``kinetis_queue.correlation``, kinetis_queue/observability/correlation.py).
- Each attempt runs in a CONSUMER span ``<queue> process``, child of that producer span: a retry is
  another child of the same parent (and links to it), so every attempt of one job shares a trace.
  The span is current while handle() runs: pushes made by the job are its children.
- Attributes are names and counts only: messaging.system, the destination (queue), the message id (job
  id), the job class, the attempt, the connection, the outcome. Never an argument value.

With the API alone (no SDK configured) every span is a no-op; configure an SDK and an exporter as
usual (opentelemetry-instrument, or your own TracerProvider). This module loads only when TRACING is on
(check kinetis_queue.E008 asks for the library). Without one, the hooks only pass on a trace
context that arrived (a job pushed by a traced web process keeps its trace for the pushes it makes) and
otherwise cost a check per delivery.
"""

from __future__ import annotations

import time
from typing import Any, Final

from opentelemetry import context, propagate, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from kinetis_queue.contracts import Queue, QueuedJob
from kinetis_queue.hooks import DeliveryHooks
from kinetis_queue.outcomes import JobOutcome, JobReport

#: Where the envelope's metadata carries the trace context (a W3C traceparent/tracestate dict).
TRACE_KEY: Final = "kinetis_queue.trace"
#: The tracer's instrumentation name.
TRACER: Final = "kinetis_queue"

#: The package's tracer: until a provider is set it is the API's proxy, which follows the one set later.
_tracer = trace.get_tracer(TRACER)


#: Seconds between two looks for a provider set since (get_tracer_provider() reads the environment).
LOOK_EVERY: Final = 1.0


class _Provider:
    """Whether an SDK is configured: once one is, it stays (the API sets a provider once); until then,
    one look a second."""

    recording = False
    next_look = 0.0

    @classmethod
    def recording_now(cls) -> bool:
        if not cls.recording:
            now = time.monotonic()
            if now >= cls.next_look:
                cls.next_look = now + LOOK_EVERY
                provider = trace.get_tracer_provider()
                cls.recording = not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
        return cls.recording


#: Whether spans record (a real TracerProvider is set): with the API alone none does.
_recording = _Provider.recording_now


def push_metadata(queue: Queue, queue_name: str, job_class: str) -> dict[str, Any]:
    """A metadata provider (observability/setup.py, push_side()): the producer span's context, written at
    prepare() (the span itself is ended there: it marks the push)."""
    if not _recording() and not trace.get_current_span().get_span_context().is_valid:
        return {}  # no SDK and no trace to pass on: nothing to carry
    attributes = {
        "messaging.system": "kinetis_queue",
        "messaging.operation.type": "publish",
        "messaging.destination.name": queue_name,
        "kinetis_queue.job_class": job_class,
        "kinetis_queue.connection": queue.connection or "",
    }
    carrier: dict[str, str] = {}
    with _tracer.start_as_current_span(f"{queue_name} publish", kind=SpanKind.PRODUCER, attributes=attributes):
        propagate.inject(carrier)
    return {TRACE_KEY: carrier} if carrier else {}


class TracingHooks(DeliveryHooks):
    """The worker's side: a consumer span per attempt, current while handle() runs."""

    wants_reports = True

    def __init__(self) -> None:
        self.connection = ""
        #: The running attempts' (span, context token, context attached) by id(job): the pool's threads each
        #: touch their own key (a dict's get, set and pop are atomic).
        self._spans: dict[int, tuple[Any, Any, Any]] = {}

    def start(self, queue: Queue) -> None:
        self.connection = queue.connection or ""

    def started(self, job: QueuedJob) -> None:
        carrier = _carrier(job.metadata.get(TRACE_KEY) if job.metadata else None)
        if carrier is None and not _recording():
            return  # no SDK and no trace to pass on: the attempt's span would be a no-op
        parent = propagate.extract(carrier) if carrier is not None else None
        links = []
        if parent is not None:
            parent_span = trace.get_current_span(parent).get_span_context()
            if parent_span.is_valid:
                links.append(Link(parent_span, {"kinetis_queue.link": "push"}))
        span = _tracer.start_span(
            f"{job.queue} process",
            context=parent,
            kind=SpanKind.CONSUMER,
            links=links,
            attributes={
                "messaging.system": "kinetis_queue",
                "messaging.operation.type": "process",
                "messaging.destination.name": job.queue,
                "messaging.message.id": job.id,
                "kinetis_queue.job_class": job.job_class,
                "kinetis_queue.attempt": job.attempts,
                "kinetis_queue.connection": self.connection,
            },
        )
        current = trace.set_span_in_context(span)
        self._spans[id(job)] = (span, context.attach(current), current)

    def reported(self, job: QueuedJob, report: JobReport) -> None:
        held = self._spans.get(id(job))
        if held is None:
            return
        span = held[0]
        span.set_attribute("kinetis_queue.outcome", report.outcome.value)
        if report.outcome is JobOutcome.FAILED or report.error is not None:
            span.set_status(Status(StatusCode.ERROR, report.error or report.outcome.value))

    def ended(self, job: QueuedJob) -> None:
        held = self._spans.pop(id(job), None)
        if held is None:
            return
        span, token, current = held
        span.end()
        # A timed-out attempt's span ends in the watchdog's thread, whose context is not the one started()
        # changed: that one ends with the attempt in its own thread (kinetis_queue.worker.delivery).
        if context.get_current() is current:
            context.detach(token)


def _carrier(value: object) -> dict[str, str] | None:
    """The W3C carrier a job's metadata holds, its string entries only (None when there is none): the
    metadata comes with the job, and a malformed entry must not reach the propagator, which raises on one."""
    if not isinstance(value, dict):
        return None
    carrier = {key: item for key, item in value.items() if isinstance(key, str) and isinstance(item, str)}
    return carrier or None
