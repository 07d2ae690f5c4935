"""The Redis backend's connection keys (``"BACKEND": "redis"``); imports no client library.

One standalone Redis server, named by URL or by a Redis cache alias (CACHE); never a cluster.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from django.conf import settings

from kinetis_queue.exceptions import QueueConfigurationError
from kinetis_queue.schema import BackendOptions, KeyPath, Option, fail, key, number

#: Django's own Redis cache, and django-redis's (whose OPTIONS hold connection settings under other
#: names): a CACHE connection may reuse their settings.
DJANGO_CACHE: Final = "django.core.cache.backends.redis.RedisCache"
DJANGO_REDIS: Final = "django_redis.cache.RedisCache"
REDIS_CACHE_BACKENDS: Final = (DJANGO_CACHE, DJANGO_REDIS)
#: The one django-redis client class that talks to a single server (its default).
DJANGO_REDIS_CLIENT: Final = "django_redis.client.DefaultClient"
#: URL schemes that name one standalone Redis server.
REDIS_URL_SCHEMES: Final = ("redis://", "rediss://", "unix://")


def _cluster(value: Any, path: KeyPath) -> None:
    if value is not False:
        raise fail(
            path,
            "is not supported: the redis backend needs one standalone server "
            "(its Lua scripts span three keys per queue, and no cluster redirect is followed)",
        )


def _prefix(value: Any, path: KeyPath) -> None:
    if type(value) is not str:
        raise fail(path, "must be a string (prepended to every key)")


def _server(entry: Mapping[str, Any], path: KeyPath) -> None:
    """Exactly one of URL and CACHE, and the server it names is one redis://, rediss:// or unix:// URL."""
    if ("URL" in entry) == ("CACHE" in entry):
        raise fail((*path, "URL"), "or ['CACHE'] must be set (one of the two)")
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
