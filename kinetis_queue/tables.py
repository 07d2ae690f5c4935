"""Whether the kinetis_queue tables exist in a database: a forgotten ``migrate`` told in plain words.

The commands check once at start-up; how a database is asked (``missing()``), and the error a
refused statement becomes (``explain()``), live with the SQL backend (backends/sql/tables.py).
"""

from __future__ import annotations

from django.apps import apps
from django.db import DatabaseError, connections, router

from kinetis_queue.backends.sql.tables import missing
from kinetis_queue.exceptions import QueueTablesMissingError


def app_tables(alias: str) -> list[str]:
    """The tables of the kinetis_queue models that ``migrate`` creates in database ``alias``."""
    return [
        model._meta.db_table
        for model in apps.get_app_config("kinetis_queue").get_models()
        if router.allow_migrate_model(alias, model)
    ]


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
