"""System checks (``manage.py check``; the warnings with ``check --deploy``).

Errors:
- kinetis_queue.E001: the KINETIS_QUEUE setting does not validate; the message names the key. This
  includes an SQL connection whose DATABASE is not an alias in DATABASES (the hint lists them).
- kinetis_queue.E002: a connection's backend needs a client library that is not installed.
- kinetis_queue.E003: a connection's custom BACKEND cannot be imported or is not a Queue subclass.

Warnings (deployment only):
- kinetis_queue.W001: the default connection is the sync backend (jobs run inside the request).
- kinetis_queue.W002: TIMEOUT is not below VISIBILITY_TIMEOUT on a backend whose reservations expire.
- kinetis_queue.W003: an SQL connection stores jobs in SQLite (one writer at a time).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register
from django.core.checks import Warning as CheckWarning

from kinetis_queue import conf
from kinetis_queue.exceptions import QueueConfigurationError, QueueUnavailableError

#: The tail of conf's message for an SQL connection's unknown DATABASE alias.
_MISSING_ALIAS = "['DATABASE'] must name an alias in DATABASES"


def _load() -> tuple[conf.QueueSettings | None, list[CheckMessage]]:
    try:
        return conf.load(), []
    except QueueConfigurationError as exc:
        message = str(exc)
        hint = f"DATABASES has: {', '.join(settings.DATABASES)}." if message.endswith(_MISSING_ALIAS) else None
        return None, [Error(message, hint=hint, id="kinetis_queue.E001")]


@register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E001-E003: the setting validates and every connection's backend can be loaded."""
    from kinetis_queue.connections import backend_class

    loaded, errors = _load()
    if loaded is None:
        return errors
    for name, connection in loaded.connections.items():
        try:
            backend_class(connection)
        except QueueUnavailableError as exc:
            errors.append(Error(str(exc), id="kinetis_queue.E002"))
        except QueueConfigurationError as exc:
            errors.append(Error(str(exc), obj=name, id="kinetis_queue.E003"))
    return errors


@register(deploy=True)
def check_deployment(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W001-W003: settings that work but are risky in production."""
    from kinetis_queue.connections import backend_class
    from kinetis_queue.contracts import RenewableQueue

    loaded, _ = _load()
    if loaded is None:
        return []  # check_settings reports it
    warnings: list[CheckMessage] = []
    default = loaded.connections[loaded.default_connection]
    if default.backend == "sync":
        warnings.append(CheckWarning(
            f"The default queue connection {default.name!r} uses the sync backend: every push runs its job "
            "inside the pushing request, with no retry and no worker.",
            hint="Use a durable backend (sql, redis, sqs, rabbitmq) for DEFAULT_CONNECTION in production.",
            id="kinetis_queue.W001",
        ))
    for name, connection in loaded.connections.items():
        try:
            renewable = issubclass(backend_class(connection), RenewableQueue)
        except Exception:
            renewable = False  # check_settings reports why the class cannot be loaded
        if renewable and connection.timeout is not None and connection.timeout >= connection.visibility_timeout:
            warnings.append(CheckWarning(
                f"Connection {name!r}: TIMEOUT ({connection.timeout:g}s) is not below VISIBILITY_TIMEOUT "
                f"({connection.visibility_timeout}s). The worker renews a running job's reservation, but a job "
                "that stalls its heartbeat (a long C call holding the GIL) is redelivered while it still runs.",
                hint="Keep the worker's --timeout / TIMEOUT below VISIBILITY_TIMEOUT.",
                obj=name, id="kinetis_queue.W002",
            ))
        if connection.backend == "sql":
            alias = connection.options.get("DATABASE", "default")
            if settings.DATABASES[alias].get("ENGINE", "").endswith("sqlite3"):
                warnings.append(CheckWarning(
                    f"Connection {name!r} keeps its jobs in SQLite (database {alias!r}): one writer at a time, "
                    "so workers and pushes wait for each other's write lock.",
                    hint="Use PostgreSQL or MySQL 8 / MariaDB 10.6+ for the jobs table in production.",
                    obj=name, id="kinetis_queue.W003",
                ))
    return warnings
