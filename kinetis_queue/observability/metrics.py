"""Prometheus metrics (``KINETIS_QUEUE["METRICS"] = True``, the ``metrics`` extra: prometheus_client).

- ``kinetis_queue_pushed_total{connection,queue,job}``: pushes stored, counted in the pushing process;
- ``kinetis_queue_jobs_total{connection,queue,job,outcome}``: deliveries by what they became
  (succeeded, released, failed, lost, snoozed, skipped, deferred), counted in the worker;
- ``kinetis_queue_job_duration_seconds{connection,queue,job}``: a histogram of each delivery's time
  from taking it to its settlement (the tally's BUCKETS);
- ``kinetis_queue_queue_depth{connection,queue,state}``: ready, delayed and reserved jobs, read from
  the stores when the view is scraped (the web process's own registry).

``job`` is the job's class path (a task's or receiver's name for those carriers), never an argument; a
name this process has not registered (kinetis_queue.payload.registry.known_name: a forged payload's) is counted
as ``(unknown)``, so the series are bounded by the code, not by the payloads.
In one process the figures are the process's tally (tally.py), read at scrape time by TallyCollector:
a delivery pays the tally's few additions, which the history shares. A ``queue_work --processes`` child
(PROMETHEUS_MULTIPROC_DIR set) counts through prometheus_client's own collectors instead, whose shared
files the supervisor sums (``queue_work --metrics-port N``): about 1.5 us more a delivery. The web process
mounts ``kinetis_queue.urls`` (``metrics/``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any, Final

from kinetis_queue.contracts import PreparedPush, Queue, QueuedJob
from kinetis_queue.hooks import DeliveryHooks
from kinetis_queue.job import display_name
from kinetis_queue.observability import status, tally
from kinetis_queue.observability.tally import BUCKETS, FIRST_BUCKET, OUTCOME_INDEX, RUNTIME, TALLY
from kinetis_queue.outcomes import JobReport
from kinetis_queue.payload.registry import name_label

_METRICS: dict[str, Any] = {}
#: Each family's name and help, the same in both ways of counting.
PUSHED: Final = ("kinetis_queue_pushed", "Pushes stored, by connection, queue and job class")
JOBS: Final = ("kinetis_queue_jobs", "Deliveries by what they became")
DURATION: Final = ("kinetis_queue_job_duration_seconds", "Seconds from taking a delivery to its settlement")
LABELS: Final = ("connection", "queue", "job")


def multiprocess() -> bool:
    """Whether this process writes prometheus_client's shared files (a ``--processes`` child)."""
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


class TallyCollector:
    """The tally's totals as Prometheus families, read when scraped (registered once per process)."""

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        labels = ["connection", "queue", "job"]
        pushed = CounterMetricFamily(
            "kinetis_queue_pushed", "Pushes stored, by connection, queue and job class", labels=labels
        )
        jobs = CounterMetricFamily("kinetis_queue_jobs", "Deliveries by what they became", labels=[*labels, "outcome"])
        duration = HistogramMetricFamily(
            "kinetis_queue_job_duration_seconds", "Seconds from taking a delivery to its settlement", labels=labels
        )
        bounds = [*(f"{bound:g}" for bound in BUCKETS), "+Inf"]
        for key, counts in sorted(TALLY.totals().items()):
            values = list(key)
            if counts[tally.PUSHED]:
                pushed.add_metric(values, counts[tally.PUSHED])
            for outcome, index in OUTCOME_INDEX.items():
                if counts[index]:
                    jobs.add_metric([*values, outcome.value], counts[index])
            per_bucket = counts[FIRST_BUCKET:]
            if any(per_bucket):
                cumulative, running = [], 0.0
                for bound, n in zip(bounds, per_bucket, strict=True):
                    running += n
                    cumulative.append((bound, running))
                duration.add_metric(values, cumulative, counts[RUNTIME])
        yield from (pushed, jobs, duration)


def register() -> None:
    """Register what this process's metrics are read from, once: the tally's collector in one process,
    prometheus_client's own collectors in a ``--processes`` child."""
    if _METRICS:
        return
    from prometheus_client import REGISTRY, Counter, Histogram

    if not multiprocess():
        REGISTRY.register(TallyCollector())
        _METRICS["tally"] = True
        return
    labels = ["connection", "queue", "job"]
    _METRICS["pushed"] = Counter("kinetis_queue_pushed", "Pushes stored, by connection, queue and job class", labels)
    _METRICS["jobs"] = Counter("kinetis_queue_jobs", "Deliveries by what they became", [*labels, "outcome"])
    _METRICS["duration"] = Histogram(
        "kinetis_queue_job_duration_seconds",
        "Seconds from taking a delivery to its settlement",
        labels,
        buckets=BUCKETS,
    )


def observe_pushes(queue: Queue, prepared: Sequence[PreparedPush]) -> None:
    """A push observer in a ``--processes`` child (observability/setup.py, push_side()): count the stored pushes."""
    counter = _METRICS["pushed"]
    connection = queue.connection or ""
    for item in prepared:
        envelope = item.envelope
        counter.labels(connection, item.queue, name_label(display_name(envelope.job_class, envelope.args))).inc()


class MultiprocessHooks(DeliveryHooks):
    """The worker's side in a ``--processes`` child: a counter and a histogram sample per delivery."""

    wants_reports = True

    def __init__(self) -> None:
        self.connection = ""
        #: The (jobs counter, duration histogram) children by (queue, job, outcome), made on first use.
        self._children: dict[tuple[str, str, str], tuple[Any, Any]] = {}

    def start(self, queue: Queue) -> None:
        self.connection = queue.connection or ""

    def reported(self, job: QueuedJob, report: JobReport) -> None:
        key = (report.queue, report.name or report.job_class, report.outcome.value)
        children = self._children.get(key)
        if children is None:  # a name first seen: kept under itself if known, else under UNKNOWN_NAME
            key = (key[0], name_label(key[1]), key[2])
            children = self._children.get(key)
        if children is None:
            children = self._children[key] = (
                _METRICS["jobs"].labels(self.connection, *key),
                _METRICS["duration"].labels(self.connection, key[0], key[1]),
            )
        children[0].inc()
        children[1].observe(report.duration)


class DepthCollector:
    """Queue depths read from the stores at scrape time (registered by the view, in the web process)."""

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        family = GaugeMetricFamily(
            "kinetis_queue_queue_depth",
            "Jobs per queue and state (at scrape time)",
            labels=["connection", "queue", "state"],
        )
        for connection in status.collect():
            for figures in connection.queues:
                for state in ("ready", "delayed", "reserved"):
                    value = getattr(figures.stats, state)
                    if value is not None:
                        family.add_metric([connection.connection, figures.queue, state], value)
        yield family


def start_server(port: int) -> None:
    """Serve this process's metrics on ``port`` (``queue_work --metrics-port``); in a ``--processes``
    supervisor with PROMETHEUS_MULTIPROC_DIR set, the children's sum instead."""
    import os

    from prometheus_client import CollectorRegistry, start_http_server

    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        start_http_server(port, registry=registry)
        return
    register()  # what the port serves is there from its first scrape, as the metrics view registers it
    start_http_server(port)
