"""Whether the kinetis_queue tables exist in a database: a forgotten ``migrate`` told in plain words.

Nothing here runs on a hot path: ``push()`` only calls ``explain()`` after the database has
already refused a statement, and the commands check once at start-up.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.apps import apps
from django.db import DatabaseError, connections, router

from kinetis_queue.exceptions import QueueTablesMissingError

#: Words a database uses when a table does not exist (SQLite, PostgreSQL, MySQL/MariaDB).
_MISSING_WORDS = ("no such table", "does not exist", "doesn't exist")


def app_tables(alias: str) -> list[str]:
    """The tables of the kinetis_queue models that ``migrate`` creates in database ``alias``."""
    return [
        model._meta.db_table
        for model in apps.get_app_config("kinetis_queue").get_models()
        if router.allow_migrate_model(alias, model)
    ]


def missing(alias: str, tables: Iterable[str]) -> list[str]:
    """Which of ``tables`` database ``alias`` lacks (one introspection query)."""
    with connections[alias].cursor() as cursor:
        present = set(connections[alias].introspection.table_names(cursor))
    return [table for table in tables if table not in present]


def explain(alias: str, error: BaseException, table: str) -> QueueTablesMissingError | None:
    """The clear error for ``error``, a database's refusal, when ``table`` is missing; None otherwise.

    Introspection confirms it; inside a transaction the database has aborted (PostgreSQL) that
    query fails too, and the refusal's own words ("no such table" and the table's name) decide.
    """
    if not isinstance(error, DatabaseError):
        return None
    text = str(error)
    try:
        absent = missing(alias, [table])
    except Exception:
        absent = [table] if table in text and any(words in text for words in _MISSING_WORDS) else []
    return QueueTablesMissingError(alias, absent) if absent else None


def require_for(queue: object | None) -> None:
    """Before ``queue_work`` or ``queue_status`` starts: the tables they use (failed jobs, restart
    markers; the jobs table of ``queue`` when it is an SQL queue) must exist.

    Raises QueueTablesMissingError. A database that cannot be reached is left for the command's own
    work to report, as before this check existed.
    """
    from kinetis_queue.backends.sql import SqlQueue
    from kinetis_queue.models import FailedJob, RestartMarker

    if isinstance(queue, SqlQueue):
        try:
            absent = queue.missing_tables()  # on the worker's own, time-bounded connection
        except DatabaseError:
            absent = []
        if absent:
            raise QueueTablesMissingError(queue.database, absent)
    needed: dict[str, list[str]] = {}
    for model in (FailedJob, RestartMarker):
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
