"""The health and metrics views: ``path("queue/", include("kinetis_queue.urls"))``.

``GET .../metrics/``: the Prometheus exposition of this process's metrics and of the queues' depths
(``KINETIS_QUEUE["METRICS"]``, kinetis_queue/observability/metrics.py); 404 while METRICS is off. It
shows names and counts only; mount it where only your scraper reaches it.


``GET .../health/`` answers 200 with ``{"status": "ok", ...}`` when every connection's store answers and a
worker of it was seen recently, else 503 with the reasons (``?connection=NAME`` for one connection,
``?workers=0`` to check the store only: a probe of the web tier). Names and counts only: no job data.
"""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from kinetis_queue.exceptions import KinetisQueueError
from kinetis_queue.observability.health import check


@never_cache
@require_GET
def health(request: HttpRequest) -> JsonResponse:
    connection = request.GET.get("connection") or None
    try:
        result = check(connection, require_worker=request.GET.get("workers") != "0")
    except KinetisQueueError as exc:  # an unknown connection, a bad setting, missing tables
        return JsonResponse({"status": "failing", "error": str(exc)}, status=503)
    return JsonResponse(result.as_dict(), status=200 if result.healthy else 503)


#: The depth gauges' registry, the view's alone: read from the stores in the request's thread only.
_DEPTH: list[Any] = []


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    from kinetis_queue import conf

    if not conf.load().metrics:
        raise Http404("KINETIS_QUEUE['METRICS'] is off")
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

    from kinetis_queue.observability.metrics import DepthCollector, register

    register()
    if not _DEPTH:
        depth = CollectorRegistry()
        depth.register(DepthCollector())
        _DEPTH.append(depth)
    body = generate_latest(REGISTRY) + generate_latest(_DEPTH[0])
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
