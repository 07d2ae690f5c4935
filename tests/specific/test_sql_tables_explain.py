"""backends/sql/tables.py explain(): only a database's refusal becomes "the tables are missing, run migrate".

status.py hands it whatever a queue raised; an error that is not the database's (a bug, a bad
argument) must reach the operator as itself, even when a table really is missing.
"""

from __future__ import annotations

from django.db import ProgrammingError

from kinetis_queue.backends.sql.tables import explain
from kinetis_queue.exceptions import QueueTablesMissingError

ABSENT = "kinetis_queue_no_such_table"


def test_a_database_refusal_naming_a_missing_table_is_explained() -> None:
    clear = explain("default", ProgrammingError(f"no such table: {ABSENT}"), ABSENT)
    assert isinstance(clear, QueueTablesMissingError)
    assert clear.tables == [ABSENT]


def test_an_error_that_is_not_the_databases_is_never_turned_into_missing_tables() -> None:
    assert explain("default", ValueError(f"no such table: {ABSENT}"), ABSENT) is None
