"""The health and metrics views: ``path("queue/", include("kinetis_queue.urls"))``, or each on its own
(``path("healthz/", views.health)``, ``path("internal/metrics/", views.metrics)``).

Both are reachable by whoever reaches the site, so neither trusts its caller by default. The access rule
is ``KINETIS_QUEUE["ENDPOINTS"]`` (conf.EndpointSettings): a request carrying ``Authorization: Bearer
<TOKEN>``, or coming from an address in ALLOW, is trusted.

``GET .../health/`` answers 200 with ``{"status": "ok", ...}`` when every connection's store answers and a
worker of it was seen recently, else 503 with a reason code per problem (``?connection=NAME`` for one
connection, ``?workers=0`` to check the store only: a probe of the web tier). Any caller gets the status
and the codes; a trusted one also gets the counts and the problems' text (a store's error names its
host, port and user).

``GET .../metrics/``: the Prometheus exposition of this process's metrics and of the queues' depths
(``KINETIS_QUEUE["METRICS"]``, kinetis_queue/observability/metrics.py); 404 while METRICS is off, 403
to a caller not trusted: closed until TOKEN or ALLOW is set.

Each answer is computed at most once per CACHE_SECONDS (5) in a process, however many callers ask: a
probe or a scraper cannot make the stores be read more often than that. Names and counts only: no job data.
"""

from __future__ import annotations

import hmac
import threading
import time
from collections.abc import Callable, Hashable
from ipaddress import IPv6Address, ip_address
from typing import Any, Final, TypeVar

from django.core.signals import setting_changed
from django.db import DatabaseError
from django.dispatch import receiver
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from kinetis_queue import conf
from kinetis_queue.exceptions import KinetisQueueError, QueueConfigurationError, QueueTablesMissingError
from kinetis_queue.observability.health import check
from kinetis_queue.observability.metrics import DepthCollector, register

T = TypeVar("T")

#: The reason codes of a health answer that could not be computed (health.py has the per-connection ones).
CONFIGURATION: Final = "configuration"
UNKNOWN_CONNECTION: Final = "unknown_connection"
TABLES_MISSING: Final = "tables_missing"
DATABASE_UNREACHABLE: Final = "database_unreachable"


#: The metrics view's answer to an untrusted caller: what lets a scraper in, nothing about the site.
FORBIDDEN: Final = "Forbidden: KINETIS_QUEUE['ENDPOINTS'] trusts a bearer TOKEN or the client addresses in ALLOW.\n"


def trusted(request: HttpRequest, rule: conf.EndpointSettings) -> bool:
    """Whether ``request`` passes ENDPOINTS' rule: the bearer TOKEN, or a client address in ALLOW."""
    if rule.token is not None:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), rule.token.encode()):
            return True
    if rule.allow:
        try:
            address = ip_address(request.META.get("REMOTE_ADDR", ""))
        except ValueError:
            return False
        if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in rule.allow)
    return False


class Answers:
    """Answers reused for a while: computed once per key and window, the callers meanwhile waiting for it.

    The keys are few (one per view and configured connection), and settled by the views, never taken
    from a request as given.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[Hashable, tuple[float, Any]] = {}
        self._computing: dict[Hashable, threading.Lock] = {}

    def get(self, key: Hashable, seconds: float, compute: Callable[[], T]) -> T:
        """The answer for ``key`` computed less than ``seconds`` ago, else ``compute()``'s, kept."""
        with self._lock:
            found = self._fresh(key)
            if found is not None:
                return found[0]  # type: ignore[no-any-return]
            computing = self._computing.setdefault(key, threading.Lock())
        with computing:  # one caller computes; the others wait and take its answer
            with self._lock:
                found = self._fresh(key)
            if found is not None:
                return found[0]  # type: ignore[no-any-return]
            value = compute()
            with self._lock:
                self._entries[key] = (time.monotonic() + seconds, value)
        return value

    def _fresh(self, key: Hashable) -> tuple[Any] | None:
        entry = self._entries.get(key)
        return (entry[1],) if entry is not None and entry[0] > time.monotonic() else None

    def clear(self) -> None:
        """Forget every answer (the setting changed)."""
        with self._lock:
            self._entries.clear()


ANSWERS = Answers()


@receiver(setting_changed)
def _forget_on_setting_change(*, setting: str, **kwargs: Any) -> None:
    if setting in ("KINETIS_QUEUE", "DATABASES"):
        ANSWERS.clear()


#: A health answer: its HTTP status, the body any caller gets, the body a trusted caller gets.
HealthAnswer = tuple[int, dict[str, Any], dict[str, Any]]


def _failing(reason: str, error: Exception) -> HealthAnswer:
    return (
        503,
        {"status": "failing", "reasons": [reason]},
        {"status": "failing", "reasons": [reason], "error": str(error)},
    )


def _health(connection: str | None, require_worker: bool) -> HealthAnswer:
    try:
        result = check(connection, require_worker=require_worker)
    except QueueTablesMissingError as exc:
        return _failing(TABLES_MISSING, exc)
    except KinetisQueueError as exc:  # a bad setting found while reading
        return _failing(CONFIGURATION, exc)
    except DatabaseError as exc:  # the Django database, where the registry and the failed records are
        return _failing(DATABASE_UNREACHABLE, exc)
    full = result.as_dict()
    public = {
        "status": full["status"],
        "connections": [
            {"connection": c["connection"], "healthy": c["healthy"], "reasons": c["reasons"]}
            for c in full["connections"]
        ],
    }
    return 200 if result.healthy else 503, public, full


@never_cache
@require_GET
def health(request: HttpRequest) -> JsonResponse:
    try:
        settings = conf.load()
    except QueueConfigurationError as exc:  # whom to trust is part of the setting: the code alone
        status, public, _ = _failing(CONFIGURATION, exc)
        return JsonResponse(public, status=status)
    connection = request.GET.get("connection") or None
    if connection is not None and connection not in settings.connections:
        return JsonResponse({"status": "failing", "reasons": [UNKNOWN_CONNECTION]}, status=503)
    require_worker = request.GET.get("workers") != "0"
    status, public, full = ANSWERS.get(
        ("health", connection, require_worker),
        settings.endpoints.cache_seconds,
        lambda: _health(connection, require_worker),
    )
    return JsonResponse(full if trusted(request, settings.endpoints) else public, status=status)


#: The depth gauges' registry, the view's alone: read from the stores in the request's thread only.
_DEPTH: list[Any] = []


def _exposition() -> bytes:
    from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

    register()
    if not _DEPTH:
        depth = CollectorRegistry()
        depth.register(DepthCollector())
        _DEPTH.append(depth)
    return generate_latest(REGISTRY) + generate_latest(_DEPTH[0])


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    settings = conf.load()
    if not settings.metrics:
        raise Http404("KINETIS_QUEUE['METRICS'] is off")
    if not trusted(request, settings.endpoints):
        return HttpResponse(FORBIDDEN, status=403, content_type="text/plain; charset=utf-8")
    from prometheus_client import CONTENT_TYPE_LATEST

    body = ANSWERS.get(("metrics",), settings.endpoints.cache_seconds, _exposition)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
