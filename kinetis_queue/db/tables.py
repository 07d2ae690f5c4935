"""Whether the kinetis_queue tables exist in a database: a forgotten ``migrate`` told in plain words.

The commands check once at start-up; how a database is asked (``missing()``), and the error a
refused statement becomes (``explain()``), live with the SQL backend (backends/sql/tables.py).
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.db import DatabaseError, connections, router

from kinetis_queue import conf
from kinetis_queue.backends.sql import SqlQueue
from kinetis_queue.backends.sql.tables import missing
from kinetis_queue.exceptions import QueueTablesMissingError


def app_tables(alias: str) -> list[str]:
    """The tables of the kinetis_queue models that ``migrate`` creates in database ``alias``."""
    return [
        model._meta.db_table
        for model in apps.get_app_config("kinetis_queue").get_models()
        if router.allow_migrate_model(alias, model)
    ]


def store_databases(model: type[Any]) -> list[str]:
    """The databases that may hold ``model``'s rows for some connection: the one the router names, and
    each SQL connection's own (unique-job locks and concurrency slots live beside its jobs)."""

    aliases = [router.db_for_write(model)]
    for settings in conf.load().connections.values():
        if settings.backend == "sql" and settings.options["DATABASE"] not in aliases:
            aliases.append(settings.options["DATABASE"])
    return aliases


def require_for(queue: object | None) -> None:
    """Before ``queue_work`` or ``queue_status`` starts: the tables they use (failed jobs, restart
    markers, cancellations and paused queues; the jobs table of ``queue`` when it is an SQL queue) must exist.

    Raises QueueTablesMissingError. A database that cannot be reached is left for the command's own
    work to report, as before this check existed.
    """
    from kinetis_queue.models import Cancellation, FailedJob, PausedQueue, RestartMarker

    if isinstance(queue, SqlQueue):
        try:
            absent = queue.missing_tables()  # on the worker's own, time-bounded connection
        except DatabaseError:
            absent = []
        if absent:
            raise QueueTablesMissingError(queue.database, absent)
    require_models(FailedJob, RestartMarker, Cancellation, PausedQueue)


def command_requires(*models: type[Any]) -> None:
    """``require_models()`` for a management command: a forgotten migrate is its CommandError, naming the fix."""
    from django.core.management.base import CommandError

    try:
        require_models(*models)
    except QueueTablesMissingError as exc:
        raise CommandError(str(exc)) from exc


def require_models(*models: type[Any]) -> None:
    """The tables of ``models`` exist in the databases the router names for them (QueueTablesMissingError
    otherwise); a database that cannot be reached is left for the caller's own work to report."""
    needed: dict[str, list[str]] = {}
    for model in models:
        needed.setdefault(router.db_for_write(model), []).append(model._meta.db_table)
    for alias, tables in needed.items():
        db = connections[alias]
        was_open = db.connection is not None
        try:
            absent = missing(alias, tables)
        except DatabaseError:
            continue
        finally:
            if not was_open:
                db.close()
        if absent:
            raise QueueTablesMissingError(alias, absent)
