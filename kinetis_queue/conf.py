"""Reads and validates the KINETIS_QUEUE setting; every error names the offending key.

This is the only module that reads ``settings.KINETIS_QUEUE``. It reads on each call, so
``override_settings`` works, and it validates the whole setting before anything is built.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from kinetis_queue.exceptions import QueueConfigurationError
from kinetis_queue.validation import CONNECTION_NAME

#: Used when KINETIS_QUEUE is not set: one SQL connection on the default database.
DEFAULT_SETTING: dict[str, Any] = {
    "DEFAULT_CONNECTION": "default",
    "CONNECTIONS": {"default": {"BACKEND": "sql", "DATABASE": "default"}},
}

#: Built-in backends: name -> (dotted class path, client module that must be importable, pip extra).
BUILTIN_BACKENDS: dict[str, tuple[str, str | None, str | None]] = {
    "sync": ("kinetis_queue.backends.sync.SyncQueue", None, None),
    "sql": ("kinetis_queue.backends.sql.SqlQueue", None, None),
    "redis": ("kinetis_queue.backends.redis.RedisQueue", "redis", "redis"),
    "sqs": ("kinetis_queue.backends.sqs.SqsQueue", "boto3", "sqs"),
    "rabbitmq": ("kinetis_queue.backends.rabbitmq.RabbitMqQueue", "amqp", "rabbitmq"),
}

#: Keys every connection may carry; they default to the top-level value of the same name.
SHARED_KEYS = ("VISIBILITY_TIMEOUT", "MAX_ATTEMPTS", "RETRY_BASE_DELAY", "POLL_TIMEOUT", "TIMEOUT")
#: TIMEOUT: the worker's per-attempt limit in seconds (queue_work --timeout); None: no limit.
DEFAULTS: dict[str, Any] = {
    "VISIBILITY_TIMEOUT": 300, "MAX_ATTEMPTS": 0, "RETRY_BASE_DELAY": 5, "POLL_TIMEOUT": 5, "TIMEOUT": None,
}
#: Backend-specific keys each built-in backend accepts (a custom backend may carry any key).
BACKEND_KEYS: dict[str, frozenset[str]] = {
    "sync": frozenset(),
    "sql": frozenset({"DATABASE", "PREPARED_STATEMENTS", "OPERATION_TIMEOUT"}),
    "redis": frozenset({"URL", "CACHE", "PREFIX", "SOCKET_TIMEOUT", "CLUSTER"}),
    # No credential keys: boto3's own chain supplies them, so secrets never sit in settings.
    "sqs": frozenset({"REGION", "ENDPOINT_URL", "QUEUE_PREFIX"}),
    "rabbitmq": frozenset({"URL", "HEARTBEAT"}),
}
#: Cache backends whose connection settings a redis connection's CACHE may reuse.
REDIS_CACHE_BACKENDS = ("django.core.cache.backends.redis.RedisCache", "django_redis.cache.RedisCache")
#: The one django-redis client class that talks to a single server (its default).
DJANGO_REDIS_CLIENT = "django_redis.client.DefaultClient"
#: URL schemes that name one standalone Redis server.
REDIS_URL_SCHEMES = ("redis://", "rediss://", "unix://")
#: The retry delay is worker policy capped at 900 s (contract: "One transition per delivery").
MAX_RETRY_BASE_DELAY = 900


@dataclass(frozen=True)
class ConnectionSettings:
    """One validated connection entry, with the shared keys resolved against the top-level defaults."""

    name: str
    backend: str
    options: Mapping[str, Any]
    visibility_timeout: int
    max_attempts: int
    retry_base_delay: float
    poll_timeout: float
    timeout: float | None = None


@dataclass(frozen=True)
class QueueSettings:
    default_connection: str
    connections: dict[str, ConnectionSettings] = field(default_factory=dict)
    #: KINETIS_QUEUE["IMPORTS"]: modules discovery imports besides each app's jobs and tasks modules.
    imports: tuple[str, ...] = ()


def _key(*path: str) -> str:
    return "KINETIS_QUEUE" + "".join(f"[{p!r}]" for p in path)


def _fail(path: tuple[str, ...], problem: str) -> QueueConfigurationError:
    return QueueConfigurationError(f"{_key(*path)} {problem}")


def _number(value: Any, path: tuple[str, ...], *, integer: bool, low: float, high: float | None,
            low_open: bool = False) -> Any:
    ok_type = type(value) is int if integer else type(value) in (int, float)
    if not ok_type or not math.isfinite(value):
        raise _fail(path, f"must be {'an int' if integer else 'a number'}")
    if (value <= low if low_open else value < low) or (high is not None and value > high):
        bound = f"{'more than' if low_open else 'at least'} {low:g}" + (f" and at most {high:g}" if high else "")
        raise _fail(path, f"must be {bound}")
    return value


def _shared(value: Any, key: str, path: tuple[str, ...], backend: str | None) -> Any:
    if key == "VISIBILITY_TIMEOUT":
        high = 43200 if backend == "sqs" else None
        return _number(value, path, integer=True, low=1, high=high)
    if key == "MAX_ATTEMPTS":
        return _number(value, path, integer=True, low=0, high=None)
    if key == "RETRY_BASE_DELAY":
        return _number(value, path, integer=False, low=0, high=MAX_RETRY_BASE_DELAY)
    if key == "TIMEOUT" and value is None:
        return None
    return _number(value, path, integer=False, low=0, high=None, low_open=True)  # POLL_TIMEOUT, TIMEOUT


def load() -> QueueSettings:
    """Validate the whole KINETIS_QUEUE setting and return it; raises QueueConfigurationError."""
    raw = getattr(settings, "KINETIS_QUEUE", None)
    if raw is None:
        raw = DEFAULT_SETTING
    if not isinstance(raw, Mapping):
        raise QueueConfigurationError("KINETIS_QUEUE must be a dict")
    allowed_top = {"DEFAULT_CONNECTION", "CONNECTIONS", "IMPORTS", *SHARED_KEYS}
    for key in raw:
        if key not in allowed_top:
            raise _fail((str(key),), f"is not a known key (known: {', '.join(sorted(allowed_top))})")
    defaults = dict(DEFAULTS)
    for key in SHARED_KEYS:
        if key in raw:
            defaults[key] = _shared(raw[key], key, (key,), None)
    connections = raw.get("CONNECTIONS")
    if not isinstance(connections, Mapping) or not connections:
        raise _fail(("CONNECTIONS",), "must be a non-empty dict of connection name -> settings")
    parsed: dict[str, ConnectionSettings] = {}
    for name, entry in connections.items():
        parsed[name] = _connection(name, entry, defaults)
    default = raw.get("DEFAULT_CONNECTION", "default")
    if type(default) is not str or default not in parsed:
        raise _fail(("DEFAULT_CONNECTION",), "must name one of KINETIS_QUEUE['CONNECTIONS']")
    return QueueSettings(default, parsed, _imports(raw))


#: A dotted module name: identifiers separated by dots.
_MODULE_NAME = re.compile(r"[^\W\d]\w*(?:\.[^\W\d]\w*)*")


def imports() -> tuple[str, ...]:
    """KINETIS_QUEUE["IMPORTS"] alone, validated: discovery reads it without the rest of the setting."""
    raw = getattr(settings, "KINETIS_QUEUE", None)
    return _imports(raw) if isinstance(raw, Mapping) else ()


def _imports(raw: Mapping[str, Any]) -> tuple[str, ...]:
    """The IMPORTS list: dotted module names the worker imports at start-up (as Celery's ``imports``)."""
    value = raw.get("IMPORTS", ())
    if not isinstance(value, list | tuple):
        raise _fail(("IMPORTS",), "must be a list of dotted module names")
    for index, name in enumerate(value):
        if type(name) is not str or _MODULE_NAME.fullmatch(name) is None:
            raise QueueConfigurationError(f"{_key('IMPORTS')}[{index}] must be a dotted module name, such as "
                                          "'reports.schedules'")
    return tuple(value)


def _connection(name: Any, entry: Any, defaults: dict[str, Any]) -> ConnectionSettings:
    if type(name) is not str or CONNECTION_NAME.fullmatch(name) is None:
        raise _fail(("CONNECTIONS",), f"has an invalid connection name {name!r}: use ^[a-z][a-z0-9]*$")
    path = ("CONNECTIONS", name)
    if not isinstance(entry, Mapping):
        raise _fail(path, "must be a dict")
    backend = entry.get("BACKEND")
    if type(backend) is not str or not backend:
        raise _fail((*path, "BACKEND"), f"must be one of {', '.join(BUILTIN_BACKENDS)} or a dotted path")
    if backend not in BUILTIN_BACKENDS and "." not in backend:
        raise _fail((*path, "BACKEND"), f"names unknown backend {backend!r}: use one of "
                    f"{', '.join(BUILTIN_BACKENDS)} or a dotted path to a Queue class")
    values = dict(defaults)
    builtin = backend in BUILTIN_BACKENDS
    for key, value in entry.items():
        if key == "BACKEND":
            continue
        if key in SHARED_KEYS:
            values[key] = _shared(value, key, (*path, key), backend)
        elif builtin and key not in BACKEND_KEYS[backend]:
            known = sorted({"BACKEND", *SHARED_KEYS, *BACKEND_KEYS[backend]})
            raise _fail((*path, str(key)), f"is not a setting of the {backend} backend (known: {', '.join(known)})")
    if backend == "sqs" and values["VISIBILITY_TIMEOUT"] > 43200:
        raise _fail((*path, "VISIBILITY_TIMEOUT"), "must be at most 43200 for the sqs backend")
    if backend == "sqs":
        for key in ("REGION", "ENDPOINT_URL"):
            if entry.get(key) is not None and (type(entry[key]) is not str or not entry[key]):
                raise _fail((*path, key), "must be a non-empty string, or None for boto3's own default")
        prefix = entry.get("QUEUE_PREFIX", "")
        if type(prefix) is not str or not all(c.isascii() and (c.isalnum() or c in "-_") for c in prefix) \
                or len(prefix) > 79:
            raise _fail((*path, "QUEUE_PREFIX"), "must be at most 79 letters, digits, '-' or '_'")
    if backend == "sql":
        database = entry.get("DATABASE", "default")
        if type(database) is not str or database not in settings.DATABASES:
            raise _fail((*path, "DATABASE"), "must name an alias in DATABASES")
        if type(entry.get("PREPARED_STATEMENTS", True)) is not bool:
            raise _fail((*path, "PREPARED_STATEMENTS"), "must be True or False")
        if "OPERATION_TIMEOUT" in entry:
            _number(entry["OPERATION_TIMEOUT"], (*path, "OPERATION_TIMEOUT"), integer=False, low=0, high=None,
                    low_open=True)
    if backend == "redis":
        _check_redis(entry, path)
    if backend == "rabbitmq":
        # The URL's full parse (host, port, vhost) happens when the queue is built, naming this key too.
        amqp_url = entry.get("URL", "amqp://")
        if type(amqp_url) is not str or not amqp_url.startswith(("amqp://", "amqps://")):
            raise _fail((*path, "URL"), "must be an amqp:// or amqps:// URL")
        if "HEARTBEAT" in entry:
            _number(entry["HEARTBEAT"], (*path, "HEARTBEAT"), integer=True, low=0, high=65535)
    return ConnectionSettings(
        name=name,
        backend=backend,
        options=entry,
        visibility_timeout=values["VISIBILITY_TIMEOUT"],
        max_attempts=values["MAX_ATTEMPTS"],
        retry_base_delay=values["RETRY_BASE_DELAY"],
        poll_timeout=values["POLL_TIMEOUT"],
        timeout=values["TIMEOUT"],
    )


def _check_redis(entry: Mapping[str, Any], path: tuple[str, ...]) -> None:
    """One standalone Redis server, named by URL or by a Redis cache alias (CACHE); never a cluster."""
    if entry.get("CLUSTER", False) is not False:
        raise _fail((*path, "CLUSTER"), "is not supported: the redis backend needs one standalone server "
                    "(its Lua scripts span three keys per queue, and no cluster redirect is followed)")
    if ("URL" in entry) == ("CACHE" in entry):
        raise _fail((*path, "URL"), "or ['CACHE'] must be set (one of the two)")
    url, where = entry.get("URL"), _key(*path, "URL")
    if "CACHE" in entry:
        alias = entry["CACHE"]
        cache = settings.CACHES.get(alias) if type(alias) is str else None
        if not isinstance(cache, Mapping) or cache.get("BACKEND") not in REDIS_CACHE_BACKENDS:
            raise _fail((*path, "CACHE"), f"must name a CACHES alias with BACKEND {' or '.join(REDIS_CACHE_BACKENDS)}")
        if (cache.get("OPTIONS") or {}).get("CLIENT_CLASS", DJANGO_REDIS_CLIENT) != DJANGO_REDIS_CLIENT:
            raise QueueConfigurationError(f"CACHES[{alias!r}]['OPTIONS']['CLIENT_CLASS'] is not supported by the "
                                          f"redis queue backend: only {DJANGO_REDIS_CLIENT} (one server)")
        location = cache.get("LOCATION")
        servers = re.split("[;,]", location) if isinstance(location, str) else list(location or [None])
        url, where = servers[0].strip() if isinstance(servers[0], str) else servers[0], f"CACHES[{alias!r}]['LOCATION']"
    if type(url) is not str or not url.startswith(REDIS_URL_SCHEMES):
        raise QueueConfigurationError(f"{where} must be a {', '.join(REDIS_URL_SCHEMES)} URL")
    if type(entry.get("PREFIX", "")) is not str:
        raise _fail((*path, "PREFIX"), "must be a string (prepended to every key)")
    if "SOCKET_TIMEOUT" in entry:
        _number(entry["SOCKET_TIMEOUT"], (*path, "SOCKET_TIMEOUT"), integer=False, low=0, high=None, low_open=True)


def connection_settings(name: str | None = None) -> ConnectionSettings:
    """The validated settings of connection ``name`` (the default connection when None)."""
    loaded = load()
    key = loaded.default_connection if name is None else name
    try:
        return loaded.connections[key]
    except KeyError:
        raise QueueConfigurationError(f"{_key('CONNECTIONS', key)} is not configured") from None
