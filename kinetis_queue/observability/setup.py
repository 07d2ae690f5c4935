"""Switching the observability parts on from KINETIS_QUEUE (METRICS, TRACING, JOB_LOG, HISTORY), at start-up and
whenever the setting changes: the push-side providers and observers, and the hooks of each new Worker; and
``ObservabilityMiddleware``, which carries both into the chain (kinetis_queue.middleware)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kinetis_queue import conf, hooks
from kinetis_queue.exceptions import QueueConfigurationError
from kinetis_queue.middleware import Middleware, PushDraft, Store
from kinetis_queue.observability import correlation, tally
from kinetis_queue.observability import history as history_module
from kinetis_queue.observability import metrics as metrics_module
from kinetis_queue.observability.correlation import CorrelationHooks
from kinetis_queue.observability.logs import JobLogHooks
from kinetis_queue.observability.tally import TallyHooks

if TYPE_CHECKING:
    from kinetis_queue.contracts import PreparedPush, Queue

#: A push's metadata from one source (its keys and values), given the connection's queue, the queue name and the
#: job's class.
MetadataProvider = Callable[["Queue", str, str], dict[str, Any]]
#: Told of pushes once stored, given the connection's queue.
PushObserver = Callable[["Queue", Sequence["PreparedPush"]], None]

#: Each switch's module and the pip extra it needs.
NEEDS = {"METRICS": ("prometheus_client", "metrics"), "TRACING": ("opentelemetry", "otel")}


def missing_libraries(settings: conf.QueueSettings) -> list[str]:
    """The switches on whose library is not installed (check kinetis_queue.E008)."""
    wanted = {"METRICS": settings.metrics, "TRACING": settings.tracing}
    return [
        f"KINETIS_QUEUE['{name}'] needs {module}: pip install 'kinetis-queue[{extra}]'"
        for name, (module, extra) in NEEDS.items()
        if wanted[name] and importlib.util.find_spec(module) is None
    ]


def _flags() -> tuple[bool, bool, bool, bool]:
    """METRICS, TRACING, JOB_LOG and HISTORY as the setting has them (the first two off while their library
    is missing, the whole lot off while the setting is invalid: the checks report both)."""
    try:
        settings = conf.load()
    except QueueConfigurationError:
        return False, False, False, False
    if missing_libraries(settings):
        return False, False, settings.job_log, settings.history
    return settings.metrics, settings.tracing, settings.job_log, settings.history


def push_side() -> tuple[tuple[MetadataProvider, ...], tuple[PushObserver, ...]]:
    """What the setting asks of each push: the metadata providers (the correlation id, the trace context), given
    the connection's queue, the queue name and the job's class; and the observers told of each push once stored
    (the metrics' and the history's counts). Switches the history's writer and registers the metrics' collectors
    to match, as the chain is read from the settings (kinetis_queue.middleware)."""
    metrics, tracing, _, history = _flags()
    providers: list[MetadataProvider] = [correlation.push_metadata]
    observers: list[PushObserver] = []
    history_module.switch(history)
    per_process_metrics = False
    if metrics:
        metrics_module.register()
        per_process_metrics = metrics_module.multiprocess()
        if per_process_metrics:
            observers.append(metrics_module.observe_pushes)
    if history or (metrics and not per_process_metrics):
        observers.append(tally.observe_pushes)
    if tracing:
        from kinetis_queue.observability import tracing as tracing_module

        providers.append(tracing_module.push_metadata)
    return tuple(providers), tuple(observers)


def worker_hooks() -> list[hooks.DeliveryHooks]:
    """The observability hooks of a new Worker (appended to the app's others): the tally's (one count per
    delivery, read by the history and by the metrics of one process), then those switched on."""

    metrics, tracing, job_log, history = _flags()
    found: list[hooks.DeliveryHooks] = [CorrelationHooks()]
    per_process_metrics = False
    if metrics:
        per_process_metrics = metrics_module.multiprocess()
        if per_process_metrics:
            found.append(metrics_module.MultiprocessHooks())
    if history:
        found.append(history_module.HistoryHooks())
    elif metrics and not per_process_metrics:
        found.append(TallyHooks())
    if tracing:
        from kinetis_queue.observability.tracing import TracingHooks

        found.append(TracingHooks())
    if job_log:
        found.append(JobLogHooks())
    return found


class ObservabilityMiddleware(hooks.HookChain, Middleware):
    """Observability in the chain. On the push side: the metadata providers' data (the trace context, the
    correlation id) added to each push, and the push observers (metrics, history) told of each push stored;
    an observer's error never fails a push. Around deliveries: ``worker_hooks()``, which a worker's chain takes
    in its place (a HookChain is flattened into the chain that holds it)."""

    def __init__(self) -> None:
        super().__init__(worker_hooks())
        self.providers, self.push_observers = push_side()

    def prepare(self, draft: PushDraft) -> None:
        providers = self.providers
        if providers:
            metadata = draft.metadata
            for provider in providers:
                metadata.update(provider(draft.queue, draft.queue_name, draft.job_class))

    def send(self, queue: Queue, prepared: Sequence[PreparedPush], store: Store) -> list[str]:
        ids = store(prepared)
        for observer in self.push_observers:
            try:
                observer(queue, prepared)
            except Exception:  # noqa: S110 - observers never decide (contract)
                pass
        return ids
