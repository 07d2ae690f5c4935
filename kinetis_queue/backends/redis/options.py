"""The Redis backend's connection keys (``"BACKEND": "redis"``); imports no client library.

Exactly one of: a standalone server (URL, or the server of a Redis cache alias: CACHE), a Redis Cluster
(CLUSTER_NODES: start node URLs) or a Sentinel-managed master (SENTINELS and SENTINEL_SERVICE).
docs/backends/redis.md says what each guarantees.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from django.conf import settings

from kinetis_queue.exceptions import QueueConfigurationError
from kinetis_queue.schema import BackendOptions, BuiltinBackend, KeyPath, Option, fail, integer, key, number

#: Django's own Redis cache, and django-redis's (whose OPTIONS hold connection settings under other
#: names): a CACHE connection may reuse their settings.
DJANGO_CACHE: Final = "django.core.cache.backends.redis.RedisCache"
DJANGO_REDIS: Final = "django_redis.cache.RedisCache"
REDIS_CACHE_BACKENDS: Final = (DJANGO_CACHE, DJANGO_REDIS)
#: The one django-redis client class that talks to a single server (its default).
DJANGO_REDIS_CLIENT: Final = "django_redis.client.DefaultClient"
#: URL schemes that name one standalone Redis server.
REDIS_URL_SCHEMES: Final = ("redis://", "rediss://", "unix://")


#: The keys that each name where the server is: exactly one group is set.
WHERE_KEYS: Final = ("URL", "CACHE", "CLUSTER_NODES", "SENTINELS")


def _cluster(value: Any, path: KeyPath) -> None:
    if value is not False:
        raise fail(path, "is not a switch: name a cluster's start nodes in CLUSTER_NODES (a list of redis:// URLs)")


def _urls(what: str) -> Any:
    """A non-empty list (or tuple) of redis:// or rediss:// URLs, each naming a host and port."""

    def check(value: Any, path: KeyPath) -> None:
        if value is None:
            return
        if not isinstance(value, list | tuple) or not value:
            raise fail(path, f"must be a non-empty list of redis:// URLs ({what})")
        for index, url in enumerate(value):
            if type(url) is not str or not url.startswith(("redis://", "rediss://")):
                raise fail((*path, str(index)), f"must be a redis:// or rediss:// URL ({what})")

    return check


def _service(value: Any, path: KeyPath) -> None:
    if value is not None and (type(value) is not str or not value):
        raise fail(path, "must be the name of the master the sentinels monitor (a non-empty string)")


def _prefix(value: Any, path: KeyPath) -> None:
    if type(value) is not str:
        raise fail(path, "must be a string (prepended to every key)")


def _server(entry: Mapping[str, Any], path: KeyPath) -> None:
    """Exactly one of URL, CACHE, CLUSTER_NODES and SENTINELS (with SENTINEL_SERVICE); a URL or CACHE
    names one redis://, rediss:// or unix:// URL."""
    given = [name for name in WHERE_KEYS if entry.get(name) is not None]
    if len(given) != 1:
        others = " or ".join(f"[{name!r}]" for name in WHERE_KEYS[1:])
        raise fail((*path, "URL"), f"{others} must be set (exactly one of them; found {len(given)})")
    if ("SENTINELS" in given) != (entry.get("SENTINEL_SERVICE") is not None):
        raise fail((*path, "SENTINEL_SERVICE"), "and ['SENTINELS'] go together (the service and its sentinels)")
    if given[0] in ("CLUSTER_NODES", "SENTINELS"):
        return
    url, where = entry.get("URL"), key(*path, "URL")
    if "CACHE" in entry:
        alias = entry["CACHE"]
        cache = settings.CACHES.get(alias) if type(alias) is str else None
        if not isinstance(cache, Mapping) or cache.get("BACKEND") not in REDIS_CACHE_BACKENDS:
            raise fail((*path, "CACHE"), f"must name a CACHES alias with BACKEND {' or '.join(REDIS_CACHE_BACKENDS)}")
        if (cache.get("OPTIONS") or {}).get("CLIENT_CLASS", DJANGO_REDIS_CLIENT) != DJANGO_REDIS_CLIENT:
            raise QueueConfigurationError(
                f"CACHES[{alias!r}]['OPTIONS']['CLIENT_CLASS'] is not supported by the "
                f"redis queue backend: only {DJANGO_REDIS_CLIENT} (one server)"
            )
        location = cache.get("LOCATION")
        servers = re.split("[;,]", location) if isinstance(location, str) else list(location or [None])
        url, where = servers[0].strip() if isinstance(servers[0], str) else servers[0], f"CACHES[{alias!r}]['LOCATION']"
    if type(url) is not str or not url.startswith(REDIS_URL_SCHEMES):
        raise QueueConfigurationError(f"{where} must be a {', '.join(REDIS_URL_SCHEMES)} URL")


OPTIONS = BackendOptions(
    (
        Option("CLUSTER", False, _cluster),
        #: A Redis Cluster: URLs of some of its nodes, from which the slot map is read (cluster.py).
        Option("CLUSTER_NODES", None, _urls("a Redis Cluster's start nodes")),
        #: A master managed by Redis Sentinel: the sentinels' URLs and the name they monitor it by.
        Option("SENTINELS", None, _urls("the sentinels")),
        Option("SENTINEL_SERVICE", None, _service),
        #: After each push, wait for this many replicas to have it (Redis WAIT), or fail the push as unknown.
        Option("WAIT_REPLICAS", 0, integer(0)),
        #: Seconds that WAIT may take.
        Option("WAIT_TIMEOUT", 1.0, number(0, low_open=True)),
        #: The server's URL, or (CACHE) the alias of a Redis cache in CACHES whose server to use.
        Option("URL"),
        Option("CACHE"),
        #: Prepended to every key this connection writes.
        Option("PREFIX", "", _prefix),
        #: Seconds a command may wait on the socket (None: client.DEFAULT_SOCKET_TIMEOUT).
        Option("SOCKET_TIMEOUT", None, number(0, low_open=True)),
    ),
    check_entry=_server,
)
#: This backend, as conf finds it (kinetis_queue.conf.builtin_backends).
BACKEND = BuiltinBackend("redis", "kinetis_queue.backends.redis.RedisQueue", OPTIONS, client="redis", extra="redis")
