"""Reads and validates the KINETIS_QUEUE setting; every error names the offending key.

This is the only module that reads ``settings.KINETIS_QUEUE``. It reads on each call, so
``override_settings`` works, and it validates the whole setting before anything is built. It checks
the top-level and shared keys itself and asks each backend for the schema of its own keys
(``backend_options``; schema.py).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from ipaddress import IPv4Network, IPv6Network, ip_network
from pathlib import Path
from typing import Any

from django.conf import settings

from kinetis_queue.exceptions import QueueConfigurationError
from kinetis_queue.schema import (
    BackendOptions,
    BuiltinBackend,
    KeyPath,
    Option,
    boolean,
    fail,
    integer,
    key,
    number,
    optional,
)
from kinetis_queue.validation import CONNECTION_NAME, MAX_COUNTER, MAX_RETRY_DELAY, QUEUE_NAME

#: Used when KINETIS_QUEUE is not set: one SQL connection on the default database.
DEFAULT_SETTING: dict[str, Any] = {
    "DEFAULT_CONNECTION": "default",
    "CONNECTIONS": {"default": {"BACKEND": "sql", "DATABASE": "default"}},
}

#: Where the built-in backends live: each declares itself there (BACKEND, a schema.BuiltinBackend).
BACKENDS_DIRECTORY = Path(__file__).resolve().parent.parent / "backends"


@functools.cache
def builtin_backends() -> dict[str, BuiltinBackend]:
    """The backends shipped in kinetis_queue/backends/, by BACKEND name: each package's declaration (``BACKEND``
    in its options module; a backend that is one module declares it there), found once per process."""
    found: dict[str, BuiltinBackend] = {}
    for module in pkgutil.iter_modules([str(BACKENDS_DIRECTORY)]):
        name = f"kinetis_queue.backends.{module.name}" + (".options" if module.ispkg else "")
        declared: BuiltinBackend = importlib.import_module(name).BACKEND
        found[declared.name] = declared
    return found


#: Keys every connection may carry (worker policy); they default to the top-level value of the same name.
#: TIMEOUT: the worker's per-attempt limit in seconds (queue_work --timeout); None: no limit.
SHARED_OPTIONS = (
    Option("VISIBILITY_TIMEOUT", 300, integer(1)),
    Option("MAX_ATTEMPTS", 0, integer(0)),
    Option("RETRY_BASE_DELAY", 5, number(0, MAX_RETRY_DELAY)),
    Option("POLL_TIMEOUT", 5, number(0, low_open=True)),
    Option("TIMEOUT", None, optional(number(0, low_open=True))),
)
SHARED_KEYS = tuple(option.name for option in SHARED_OPTIONS)


def _database_alias(value: Any, path: KeyPath) -> None:
    if type(value) is not str or value not in settings.DATABASES:
        raise fail(path, "must name an alias in DATABASES")


#: The transactional outbox (kinetis_queue/outbox, docs/outbox.md), on the backends whose store cannot
#: join a database transaction: OUTBOX names the database alias whose transactions a push joins.
OUTBOX_OPTIONS = (
    Option("OUTBOX", None, optional(_database_alias)),
    #: Also route a push made outside a transaction through the outbox.
    Option("OUTBOX_ALWAYS", False, boolean),
    #: Seconds an idle relay sleeps between two looks where no NOTIFY wakes it (all but PostgreSQL).
    Option("OUTBOX_POLL", 0.02, number(0, 5, low_open=True)),
    #: queue_status and the kinetis_queue.W005 check warn once this many rows wait.
    Option("OUTBOX_WARN", 1000, integer(1)),
)
OUTBOX_KEYS = tuple(option.name for option in OUTBOX_OPTIONS)
#: Top-level switches of kinetis_queue/observability, each True or False, and their defaults.
OBSERVABILITY_KEYS = {"METRICS": False, "TRACING": False, "JOB_LOG": False, "HISTORY": True}
#: Backends that refuse OUTBOX: the SQL backend's push already joins the transaction; sync runs inline.
NO_OUTBOX = {
    "sql": "the SQL backend's push is already part of the transaction on its DATABASE",
    "sync": "the sync backend runs each job inside push()",
}


@dataclass(frozen=True)
class OutboxSettings:
    """A connection's outbox: OUTBOX and its companion keys."""

    database: str
    always: bool
    poll: float
    warn: int


@dataclass(frozen=True)
class ConnectionSettings:
    """One validated connection entry, with the shared keys resolved against the top-level defaults."""

    name: str
    backend: str
    #: The backend's own keys (its settings_schema), defaults filled in; the entry as written when the
    #: backend declares no schema.
    options: Mapping[str, Any]
    visibility_timeout: int
    max_attempts: int
    retry_base_delay: float
    poll_timeout: float
    timeout: float | None = None
    #: The connection's transactional outbox (OUTBOX), or None.
    outbox: OutboxSettings | None = None


#: ENDPOINTS' CACHE_SECONDS when not set: an answer of the health and metrics views is reused this long.
DEFAULT_CACHE_SECONDS = 5
#: The shortest bearer TOKEN accepted: one that cannot be guessed.
MIN_TOKEN_LENGTH = 16


@dataclass(frozen=True)
class EndpointSettings:
    """KINETIS_QUEUE["ENDPOINTS"], validated: the access rule of the health and metrics views.

    A request is trusted when it carries ``Authorization: Bearer <TOKEN>`` or comes from an address in
    ALLOW; with neither set, none is: the metrics view answers 403 and the health view its status and
    reason codes only.
    """

    token: str | None
    allow: tuple[IPv4Network | IPv6Network, ...]
    #: Seconds an answer is reused: the stores are read at most once per window, however many ask.
    cache_seconds: float


@dataclass(frozen=True)
class QueueSettings:
    default_connection: str
    connections: dict[str, ConnectionSettings] = field(default_factory=dict)
    #: KINETIS_QUEUE["IMPORTS"]: modules discovery imports besides each app's jobs and tasks modules.
    imports: tuple[str, ...] = ()
    #: METRICS: Prometheus counters and histograms (the ``metrics`` extra); TRACING: OpenTelemetry spans
    #: (the ``otel`` extra). Both off by default (kinetis_queue/observability).
    metrics: bool = False
    tracing: bool = False
    #: JOB_LOG: one structured record per settled delivery (kinetis_queue/observability/logs.py).
    job_log: bool = False
    #: HISTORY: per-minute counts in the Django database, for queue_status --history and the dashboard
    #: (kinetis_queue/observability/history.py). On by default.
    history: bool = True
    #: ENDPOINTS: who may read the health view's details and the metrics view, and how long an answer is
    #: reused (kinetis_queue/observability/views.py).
    endpoints: EndpointSettings = field(default_factory=lambda: EndpointSettings(None, (), DEFAULT_CACHE_SECONDS))
    #: RECORD_EXPIRED: an expired job (kinetis_queue.expiry) leaves a failed-job record, so queue_retry can push
    #: it again. Off by default: it is acked and counted, nothing more.
    record_expired: bool = False


def _shared(option: Option, value: Any, path: KeyPath, max_visibility_timeout: int | None) -> Any:
    """Check one shared key; VISIBILITY_TIMEOUT also against the backend's ceiling, if it has one."""
    if option.name == "VISIBILITY_TIMEOUT" and max_visibility_timeout is not None:
        integer(1, max_visibility_timeout)(value, path)
    else:
        assert option.check is not None  # every SHARED_OPTIONS entry has its check
        option.check(value, path)
    return value


def load() -> QueueSettings:
    """Validate the whole KINETIS_QUEUE setting and return it; raises QueueConfigurationError."""
    raw = getattr(settings, "KINETIS_QUEUE", None)
    if raw is None:
        raw = DEFAULT_SETTING
    if not isinstance(raw, Mapping):
        raise QueueConfigurationError("KINETIS_QUEUE must be a dict")
    allowed_top = {
        "DEFAULT_CONNECTION",
        "CONNECTIONS",
        "IMPORTS",
        "SCHEDULE",
        "MAIL",  # validated by mail() alone (check kinetis_queue.E009), so a bad MAIL stops no push
        "ENDPOINTS",
        "MIDDLEWARE",  # its entries imported by kinetis_queue.middleware (check kinetis_queue.E011)
        "RECORD_EXPIRED",
        *OBSERVABILITY_KEYS,
        *SHARED_KEYS,
    }
    for given in raw:
        if given not in allowed_top:
            raise fail((str(given),), f"is not a known key (known: {', '.join(sorted(allowed_top))})")
    defaults = {option.name: option.default for option in SHARED_OPTIONS}
    for option in SHARED_OPTIONS:
        if option.name in raw:
            defaults[option.name] = _shared(option, raw[option.name], (option.name,), None)
    connections = raw.get("CONNECTIONS")
    if not isinstance(connections, Mapping) or not connections:
        raise fail(("CONNECTIONS",), "must be a non-empty dict of connection name -> settings")
    parsed: dict[str, ConnectionSettings] = {}
    for name, entry in connections.items():
        parsed[name] = _connection(name, entry, defaults)
    default = raw.get("DEFAULT_CONNECTION", "default")
    if type(default) is not str or default not in parsed:
        raise fail(("DEFAULT_CONNECTION",), "must name one of KINETIS_QUEUE['CONNECTIONS']")
    middleware = raw.get("MIDDLEWARE", ())
    if isinstance(middleware, str) or not isinstance(middleware, Sequence):
        raise fail(("MIDDLEWARE",), "must be a list of dotted paths of middleware classes, in order")
    for index, path in enumerate(middleware):
        if type(path) is not str or not path:
            raise fail(("MIDDLEWARE", str(index)), "must be a dotted path (a non-empty str)")
    for name in OBSERVABILITY_KEYS:
        if name in raw:
            boolean(raw[name], (name,))
    flags = {name.lower(): bool(raw.get(name, default)) for name, default in OBSERVABILITY_KEYS.items()}
    if "RECORD_EXPIRED" in raw:
        boolean(raw["RECORD_EXPIRED"], ("RECORD_EXPIRED",))
    record_expired = bool(raw.get("RECORD_EXPIRED", False))
    return QueueSettings(
        default, parsed, _imports(raw), **flags, endpoints=_endpoints(raw), record_expired=record_expired
    )


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
        raise fail(("IMPORTS",), "must be a list of dotted module names")
    for index, name in enumerate(value):
        if type(name) is not str or _MODULE_NAME.fullmatch(name) is None:
            raise QueueConfigurationError(
                f"{key('IMPORTS')}[{index}] must be a dotted module name, such as 'reports.schedules'"
            )
    return tuple(value)


def _connection(name: Any, entry: Any, defaults: dict[str, Any]) -> ConnectionSettings:
    if type(name) is not str or CONNECTION_NAME.fullmatch(name) is None:
        raise fail(("CONNECTIONS",), f"has an invalid connection name {name!r}: use ^[a-z][a-z0-9]*$")
    path = ("CONNECTIONS", name)
    if not isinstance(entry, Mapping):
        raise fail(path, "must be a dict")
    backend = entry.get("BACKEND")
    if type(backend) is not str or not backend:
        raise fail((*path, "BACKEND"), f"must be one of {', '.join(builtin_backends())} or a dotted path")
    if backend not in builtin_backends() and "." not in backend:
        raise fail(
            (*path, "BACKEND"),
            f"names unknown backend {backend!r}: use one of "
            f"{', '.join(builtin_backends())} or a dotted path to a Queue class",
        )
    schema = backend_options(backend)
    cap = schema.max_visibility_timeout if schema is not None else None
    values = dict(defaults)
    shared = {option.name: option for option in SHARED_OPTIONS}
    for given, value in entry.items():
        if given == "BACKEND" or given in OUTBOX_KEYS:
            continue
        if given in shared:
            values[given] = _shared(shared[given], value, (*path, given), cap)
        elif schema is not None and given not in schema.names:
            known = sorted({"BACKEND", *SHARED_KEYS, *schema.names, *([] if backend in NO_OUTBOX else OUTBOX_KEYS)})
            raise fail((*path, str(given)), f"is not a setting of the {backend} backend (known: {', '.join(known)})")
    if cap is not None and values["VISIBILITY_TIMEOUT"] > cap:
        raise fail((*path, "VISIBILITY_TIMEOUT"), f"must be at most {cap} for the {backend} backend")
    return ConnectionSettings(
        name=name,
        backend=backend,
        options=entry if schema is None else schema.resolve(entry, path),
        visibility_timeout=values["VISIBILITY_TIMEOUT"],
        max_attempts=values["MAX_ATTEMPTS"],
        retry_base_delay=values["RETRY_BASE_DELAY"],
        poll_timeout=values["POLL_TIMEOUT"],
        timeout=values["TIMEOUT"],
        outbox=_outbox(backend, entry, path),
    )


def _outbox(backend: str, entry: Mapping[str, Any], path: KeyPath) -> OutboxSettings | None:
    """The connection's OUTBOX keys, checked; None without OUTBOX (its companions then mean nothing)."""
    given = [name for name in OUTBOX_KEYS if name in entry]
    if given and backend in NO_OUTBOX:
        raise fail((*path, given[0]), f"is not a setting of the {backend} backend: {NO_OUTBOX[backend]}")
    values = {option.name: entry.get(option.name, option.default) for option in OUTBOX_OPTIONS}
    for option in OUTBOX_OPTIONS:
        if option.check is not None and option.name in entry:
            option.check(values[option.name], (*path, option.name))
    if values["OUTBOX"] is None:
        return None
    return OutboxSettings(
        values["OUTBOX"], values["OUTBOX_ALWAYS"], float(values["OUTBOX_POLL"]), values["OUTBOX_WARN"]
    )


# -- KINETIS_QUEUE["MAIL"]: queued email (kinetis_queue/contrib/mail, docs/mail.md) ------------------


def _dotted_path(value: Any, path: KeyPath) -> None:
    if type(value) is not str or _MODULE_NAME.fullmatch(value) is None or "." not in value:
        raise fail(path, "must be the dotted path of an email backend class")


def _mailer_alias(value: Any, path: KeyPath) -> None:
    mailers = getattr(settings, "MAILERS", None)
    if mailers is None:
        raise fail(path, "names a MAILERS alias, but MAILERS is not set (Django 6.1+); use BACKEND instead")
    if type(value) is not str or value not in mailers:
        raise fail(path, f"must name an alias in MAILERS (MAILERS has: {', '.join(map(str, mailers))})")


def _connection_name(value: Any, path: KeyPath) -> None:
    connections = getattr(settings, "KINETIS_QUEUE", None) or DEFAULT_SETTING
    known = connections.get("CONNECTIONS", {}) if isinstance(connections, Mapping) else {}
    if type(value) is not str or value not in known:
        raise fail(path, "must name one of KINETIS_QUEUE['CONNECTIONS'] (None: the default connection)")


def _queue_name(value: Any, path: KeyPath) -> None:
    if type(value) is not str or QUEUE_NAME.fullmatch(value) is None:
        raise fail(path, "must be a queue name: 1 to 80 letters, digits, '-' or '_'")


def _mail_entry(entry: Mapping[str, Any], path: KeyPath) -> None:
    if entry.get("BACKEND") is not None and entry.get("MAILER") is not None:
        raise fail(path, "sets both BACKEND and MAILER: name the real email backend one way")


#: The keys of KINETIS_QUEUE["MAIL"]. BACKEND (a dotted path, built with no options, so it reads the
#: worker's EMAIL_* settings) or MAILER (a MAILERS alias, Django 6.1+) is what sends on the worker.
MAIL_SCHEMA = BackendOptions(
    options=(
        Option("BACKEND", None, optional(_dotted_path)),
        Option("MAILER", None, optional(_mailer_alias)),
        Option("CONNECTION", None, optional(_connection_name)),
        Option("QUEUE", "default", _queue_name),
        Option("MAX_ATTEMPTS", 5, optional(integer(0, MAX_COUNTER))),
        #: The largest encoded message (JSON, attachments in base64): room under SQS's 1 MiB message.
        Option("MAX_BYTES", 900 * 1024, integer(1024, 64 * 1024 * 1024)),
        #: The database whose transaction a send inside ``atomic()`` waits for; None: queue at once.
        Option("ON_COMMIT", "default", optional(_database_alias)),
    ),
    check_entry=_mail_entry,
)
#: Django's own default email backend, used when MAIL names neither BACKEND nor MAILER.
DEFAULT_MAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"


@dataclass(frozen=True)
class MailSettings:
    """KINETIS_QUEUE["MAIL"], validated: what QueuedEmailBackend pushes to and the worker sends through."""

    #: The real email backend's dotted path, or None when ``mailer`` names a MAILERS alias instead.
    backend: str | None
    mailer: str | None
    connection: str | None
    queue: str
    max_attempts: int | None
    max_bytes: int
    on_commit: str | None


def mail() -> MailSettings:
    """KINETIS_QUEUE["MAIL"] alone, validated (an absent MAIL is every default); raises QueueConfigurationError."""
    raw = getattr(settings, "KINETIS_QUEUE", None)
    entry = raw.get("MAIL", {}) if isinstance(raw, Mapping) else {}
    if not isinstance(entry, Mapping):
        raise fail(("MAIL",), "must be a dict")
    for given in entry:
        if given not in MAIL_SCHEMA.names:
            raise fail(("MAIL", str(given)), f"is not a known key (known: {', '.join(sorted(MAIL_SCHEMA.names))})")
    values = MAIL_SCHEMA.resolve(entry, ("MAIL",))
    backend = values["BACKEND"]
    if backend is None and values["MAILER"] is None:
        backend = DEFAULT_MAIL_BACKEND
    return MailSettings(
        backend=backend,
        mailer=values["MAILER"],
        connection=values["CONNECTION"],
        queue=values["QUEUE"],
        max_attempts=values["MAX_ATTEMPTS"],
        max_bytes=values["MAX_BYTES"],
        on_commit=values["ON_COMMIT"],
    )


# -- KINETIS_QUEUE["ENDPOINTS"]: the health and metrics views (kinetis_queue/observability/views.py) -------


def _token(value: Any, path: KeyPath) -> None:
    if type(value) is not str or len(value) < MIN_TOKEN_LENGTH or not value.isascii() or not value.isprintable():
        raise fail(path, f"must be a string of at least {MIN_TOKEN_LENGTH} printable ASCII characters")
    if " " in value:
        raise fail(path, "must not contain a space")


def _networks(value: Any, path: KeyPath) -> None:
    if not isinstance(value, list | tuple):
        raise fail(path, "must be a list of client addresses or networks, such as ['127.0.0.1', '10.0.0.0/8']")
    for index, item in enumerate(value):
        try:
            ip_network(item, strict=False)
        except (TypeError, ValueError):
            raise QueueConfigurationError(
                f"{key(*path)}[{index}] must be an IP address or network, such as '10.0.0.0/8'"
            ) from None


#: The keys of KINETIS_QUEUE["ENDPOINTS"].
ENDPOINTS_SCHEMA = BackendOptions(
    options=(
        Option("TOKEN", None, optional(_token)),
        Option("ALLOW", (), _networks),
        Option("CACHE_SECONDS", DEFAULT_CACHE_SECONDS, number(1, 300)),
    )
)


def _endpoints(raw: Mapping[str, Any]) -> EndpointSettings:
    entry = raw.get("ENDPOINTS", {})
    if not isinstance(entry, Mapping):
        raise fail(("ENDPOINTS",), "must be a dict")
    for given in entry:
        if given not in ENDPOINTS_SCHEMA.names:
            known = ", ".join(sorted(ENDPOINTS_SCHEMA.names))
            raise fail(("ENDPOINTS", str(given)), f"is not a known key (known: {known})")
    values = ENDPOINTS_SCHEMA.resolve(entry, ("ENDPOINTS",))
    allow = tuple(ip_network(item, strict=False) for item in values["ALLOW"])
    return EndpointSettings(values["TOKEN"], allow, float(values["CACHE_SECONDS"]))


def backend_options(backend: str) -> BackendOptions | None:
    """The schema of a backend's own connection keys, asked of the backend itself.

    A built-in backend's comes from its options module, which imports no client library. A custom
    backend's is its Queue class's ``settings_schema`` (None: any key); a class that cannot be loaded
    has none here, and the system check reports why (kinetis_queue.E003).
    """
    builtin = builtin_backends().get(backend)
    if builtin is not None:
        return builtin.options
    module_name, _, class_name = backend.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), class_name, None)
    except (ImportError, ValueError):  # ValueError: an empty module name (".Queue")
        return None
    # Read as a declaration, not by asking issubclass(cls, Queue): settings sit below the contract.
    declared = getattr(cls, "settings_schema", None) if isinstance(cls, type) else None
    return declared if isinstance(declared, BackendOptions) else None


def connection_settings(name: str | None = None) -> ConnectionSettings:
    """The validated settings of connection ``name`` (the default connection when None)."""
    loaded = load()
    chosen = loaded.default_connection if name is None else name
    try:
        return loaded.connections[chosen]
    except KeyError:
        raise QueueConfigurationError(f"{key('CONNECTIONS', chosen)} is not configured") from None
