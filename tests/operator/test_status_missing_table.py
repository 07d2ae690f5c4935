"""queue_status says "run migrate" when an SQL connection's jobs table is missing, not a raw SQL error."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connections as db_connections

from kinetis_queue.observability import status

SCHEMA = "kq_status_unmigrated"


@pytest.fixture
def unmigrated_postgres() -> Iterator[None]:
    """Every new session on the ``postgres`` alias searches a schema without the tables (and nothing else)."""
    db = db_connections["postgres"]
    with db.cursor() as cursor:
        cursor.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE; CREATE SCHEMA {SCHEMA}")
    saved = db.settings_dict["OPTIONS"]
    db.close()
    db.settings_dict["OPTIONS"] = {**saved, "options": f"-c search_path={SCHEMA}"}
    try:
        yield
    finally:
        db.close()
        db.settings_dict["OPTIONS"] = saved
        with db.cursor() as cursor:
            cursor.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")


def test_a_missing_jobs_table_is_reported_as_such(unmigrated_postgres: None) -> None:
    [figures] = status.collect("postgres", ["default"])
    assert figures.error == (
        "QueueTablesMissingError: the kinetis_queue tables are missing in database 'postgres' "
        "(kinetis_queue_jobs): run `manage.py migrate --database postgres`"
    )
