"""Whether a table exists in a Django database, and the clear error when a statement met a missing one.

The SQL backend's own ``push()``/``pop()`` use ``explain()`` after the database refused a statement;
kinetis_queue/db/tables.py (the app's tables before a command starts) and the system checks use
``missing()``. Nothing here runs on a hot path.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import DatabaseError, connections

from kinetis_queue.exceptions import QueueTablesMissingError

#: Words a database uses when a table does not exist (SQLite, PostgreSQL, MySQL/MariaDB).
_MISSING_WORDS = ("no such table", "does not exist", "doesn't exist")


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
