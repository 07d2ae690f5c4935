"""System checks (``manage.py check``; the warnings with ``check --deploy``).

Errors:
- kinetis_queue.E001: the KINETIS_QUEUE setting does not validate; the message names the key. This
  includes an SQL connection whose DATABASE is not an alias in DATABASES (the hint lists them).
- kinetis_queue.E002: a connection's backend needs a client library that is not installed.
- kinetis_queue.E003: a connection's custom BACKEND cannot be imported or is not a Queue subclass.
- kinetis_queue.E004: a discovery module (an app's ``jobs``/``tasks`` module, a KINETIS_QUEUE["IMPORTS"]
  entry) failed to import; the message names the module and the exception. queue_work refuses to start.
- kinetis_queue.E005: a Job subclass defined in a discovery module cannot be run by a worker (no
  handle(), a handle() parameter the worker cannot pass, a class it cannot find by its path). A base
  class without handle() that has subclasses, or an abstract one, is not reported.
- kinetis_queue.E008: KINETIS_QUEUE["METRICS"] or ["TRACING"] is on and its library (prometheus_client,
  opentelemetry) is not installed: the pip extra to install is named.
- kinetis_queue.E009: KINETIS_QUEUE["MAIL"] does not validate or names no sending backend (queued
  email; registered by kinetis_queue/contrib/mail/checks.py).
- kinetis_queue.E007: a Job subclass of a discovery module has unique_* attributes a push would refuse
  (kinetis_queue.unique): unique_for out of range, an unknown scope, debounce without "started".
- kinetis_queue.E010: a Job subclass of a discovery module has an ``__init__`` no push can store
  (kinetis_queue.payload.serializer): ``*args``/``**kwargs``, or a parameter annotated with the generic
  ``models.Model`` (a payload could then load any model's row).

Database checks (``check --database ALIAS``, and ``migrate``, which runs them first):
- kinetis_queue.W004: the kinetis_queue tables are missing in that database: run ``manage.py migrate``.
  A plain ``manage.py check`` asks it about the databases the app writes to; ``migrate`` itself is
  never told to run ``migrate``. A warning, not an error: an error would stop the command that fixes it.

- kinetis_queue.W005: the transactional outbox of a connection whose OUTBOX is that database holds more
  rows than its OUTBOX_WARN: pushes commit, but no relay is sending them (or not fast enough).

Warnings (deployment only):
- kinetis_queue.W001: the default connection is the sync backend (jobs run inside the request).
- kinetis_queue.W002: TIMEOUT is not below VISIBILITY_TIMEOUT on a backend whose reservations expire.
- kinetis_queue.W003: an SQL connection stores jobs in SQLite (one writer at a time).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Iterable
from pathlib import Path
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register
from django.core.checks import Warning as CheckWarning
from django.db import DatabaseError, connections, router

from kinetis_queue import conf, unique
from kinetis_queue.backends.sql.options import UNKNOWN_ALIAS
from kinetis_queue.backends.sql.tables import missing
from kinetis_queue.connections import backend_class
from kinetis_queue.contracts import RenewableQueue
from kinetis_queue.db import tables
from kinetis_queue.exceptions import QueueConfigurationError, QueueTablesMissingError, QueueUnavailableError
from kinetis_queue.job import Job, job_class_path
from kinetis_queue.middleware import middleware_paths
from kinetis_queue.models import FailedJob
from kinetis_queue.observability.setup import missing_libraries
from kinetis_queue.outbox.relay import backlog
from kinetis_queue.payload import registry
from kinetis_queue.payload.serializer import contract_problem

#: The tail of conf's message for an SQL connection's unknown DATABASE alias.
_MISSING_ALIAS = f"['DATABASE'] {UNKNOWN_ALIAS}"


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

    loaded, _ = _load()
    if loaded is None:
        return []  # check_settings reports it
    warnings: list[CheckMessage] = []
    default = loaded.connections[loaded.default_connection]
    if default.backend == "sync":
        warnings.append(
            CheckWarning(
                f"The default queue connection {default.name!r} uses the sync backend: every push runs its job "
                "inside the pushing request, with no retry and no worker.",
                hint="Use a durable backend (sql, redis, sqs, rabbitmq) for DEFAULT_CONNECTION in production.",
                id="kinetis_queue.W001",
            )
        )
    for name, connection in loaded.connections.items():
        try:
            renewable = issubclass(backend_class(connection), RenewableQueue)
        except Exception:
            renewable = False  # check_settings reports why the class cannot be loaded
        if renewable and connection.timeout is not None and connection.timeout >= connection.visibility_timeout:
            warnings.append(
                CheckWarning(
                    f"Connection {name!r}: TIMEOUT ({connection.timeout:g}s) is not below VISIBILITY_TIMEOUT "
                    f"({connection.visibility_timeout}s). The worker renews a running job's reservation, but a job "
                    "that stalls its heartbeat (a long C call holding the GIL) is redelivered while it still runs.",
                    hint="Keep the worker's --timeout / TIMEOUT below VISIBILITY_TIMEOUT.",
                    obj=name,
                    id="kinetis_queue.W002",
                )
            )
        if connection.backend == "sql":
            alias = connection.options["DATABASE"]
            if settings.DATABASES[alias].get("ENGINE", "").endswith("sqlite3"):
                warnings.append(
                    CheckWarning(
                        f"Connection {name!r} keeps its jobs in SQLite (database {alias!r}): one writer at a time, "
                        "so workers and pushes wait for each other's write lock.",
                        hint="Use PostgreSQL or MySQL 8 / MariaDB 10.6+ for the jobs table in production.",
                        obj=name,
                        id="kinetis_queue.W003",
                    )
                )
    return warnings


@register()
def check_discovery(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E004, E005, E007, E010: every discovery module imports, and its job classes can be pushed and run."""

    errors: list[CheckMessage] = [
        Error(
            str(failure),
            obj=failure.module,
            id="kinetis_queue.E004",
            hint="Fix the module (or remove it from KINETIS_QUEUE['IMPORTS']); queue_work will not start "
            "while it fails.",
        )
        for failure in registry.discover()
    ]
    modules = registry.discovered()
    # Module-level classes: one defined inside a function exists only once the function has run.
    classes = [
        cls for cls in list(Job._registry.values()) if cls.__module__ in modules and "<locals>" not in cls.__qualname__
    ]
    for cls in classes:
        if cls.handle is Job.handle and (
            inspect.isabstract(cls)
            or any(other is not cls and issubclass(other, cls) for other in Job._registry.values())
        ):
            continue  # a base class: its subclasses are what gets pushed
        problem = registry.runnable_problem(cls)
        if problem is not None:
            errors.append(Error(problem, obj=job_class_path(cls), id="kinetis_queue.E005"))
    for cls in classes:
        problem = unique.class_problem(cls)
        if problem is not None:
            errors.append(Error(problem, obj=job_class_path(cls), id="kinetis_queue.E007"))
    for cls in classes:
        problem = contract_problem(cls)
        if problem is not None:
            errors.append(Error(problem, obj=job_class_path(cls), id="kinetis_queue.E010"))
    return errors


@register(Tags.database)
def check_tables(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W004: the kinetis_queue tables exist in each database the check is asked about (never during
    ``migrate``, which creates them)."""
    from django.core.management.commands import migrate

    command, _ = _running_command()
    return [] if isinstance(command, migrate.Command) else _table_warnings(databases or ())


@register()
def check_tables_unasked(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W004 for a plain ``manage.py check``, which runs no database check: the tables exist in the SQLite
    databases the app writes to. Only SQLite, a local file: a plain check must not wait on a database server
    it cannot reach (a build step has none); ``check --database ALIAS`` asks any database. Other commands'
    checks never touch a database."""
    from django.core.management.commands import check

    command, asked = _running_command()
    if not isinstance(command, check.Command) or asked:
        return []  # with --database, check_tables answers
    return _table_warnings(alias for alias in _app_databases() if connections[alias].vendor == "sqlite")


def _table_warnings(databases: Iterable[str]) -> list[CheckMessage]:
    warnings: list[CheckMessage] = []
    for alias in databases:
        try:
            absent = _absent(alias)
        except DatabaseError:
            continue  # an unreachable database is not this check's to report
        if absent:
            warnings.append(
                CheckWarning(
                    str(QueueTablesMissingError(alias, absent)),
                    hint="A forgotten migrate: push(), queue_work and queue_status need these tables.",
                    obj=alias,
                    id="kinetis_queue.W004",
                )
            )
    return warnings


def _absent(alias: str) -> list[str]:
    """The app's tables database ``alias`` lacks; all of them when it is an SQLite file not made yet (asking
    would make it)."""
    wanted = tables.app_tables(alias)
    db: Any = connections[alias]  # is_in_memory_db() is the SQLite wrapper's own
    if db.vendor == "sqlite" and not db.is_in_memory_db() and not Path(str(db.settings_dict["NAME"])).exists():
        return wanted
    return missing(alias, wanted)


def _running_command() -> tuple[object | None, Any]:
    """The management command running these checks, and the databases it asked them about (None: it named
    none), read from its ``BaseCommand.check()`` call up the stack; (None, None) outside a command."""
    from django.core.management import BaseCommand

    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, BaseCommand):
            return candidate, frame.f_locals.get("databases")
        frame = frame.f_back
    return None, None


def _app_databases() -> list[str]:
    """The databases the app writes to: the router's for its tables, and each SQL connection's."""
    try:
        return tables.store_databases(FailedJob)
    except QueueConfigurationError:
        return [router.db_for_write(FailedJob)]  # the setting itself is E001's to report


@register()
def check_observability(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E008: each observability switch that is on has its library."""

    try:
        loaded = conf.load()
    except QueueConfigurationError:
        return []  # reported by E001
    return [Error(problem, id="kinetis_queue.E008") for problem in missing_libraries(loaded)]


@register()
def check_middleware(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E011: each entry of KINETIS_QUEUE["MIDDLEWARE"] imports and is a middleware class."""

    try:
        conf.load()
    except QueueConfigurationError:
        return []  # reported by E001
    try:
        middleware_paths(load=True)
    except QueueConfigurationError as exc:
        return [Error(str(exc), hint="docs/middleware.md", id="kinetis_queue.E011")]
    return []


@register(Tags.database)
def check_outbox(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W005: no connection's outbox backlog is above its OUTBOX_WARN (in the databases asked about)."""

    warnings: list[CheckMessage] = []
    try:
        loaded = conf.load()
    except QueueConfigurationError:
        return []  # reported by E001
    for entry in loaded.connections.values():
        outbox = entry.outbox
        if outbox is None or outbox.database not in (databases or ()):
            continue
        try:
            waiting, _ = backlog(entry.name, outbox)
        except DatabaseError:
            continue  # an unreachable database or a missing table is not this check's to report
        if waiting > outbox.warn:
            warnings.append(
                CheckWarning(
                    f"the outbox of connection {entry.name!r} holds {waiting} pushes, above its OUTBOX_WARN "
                    f"({outbox.warn})",
                    hint="Pushes commit but are not relayed: run queue_work (or queue_relay) for that connection, "
                    "and check that its store is reachable.",
                    obj=entry.name,
                    id="kinetis_queue.W005",
                )
            )
    return warnings


# Schedules register their own check (E006) in their package.
from kinetis_queue.schedules import checks as _schedule_checks  # noqa: E402, F401
