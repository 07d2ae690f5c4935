"""queue_status when the database refuses an SQL connection's query for a reason other than a missing table:
the database's own words are shown (no "run migrate" advice, which would send the operator the wrong way)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from django.db import connections as db_connections

from kinetis_queue.observability import status


@pytest.fixture
def postgres_without_privileges() -> Iterator[str]:
    """Every new session on the ``postgres`` alias acts as a role that may not read the queue's tables."""
    role = f"kq_status_refused_{uuid.uuid4().hex[:12]}"
    db = db_connections["postgres"]
    with db.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {role} NOLOGIN")
    saved = db.settings_dict["OPTIONS"]
    db.close()
    db.settings_dict["OPTIONS"] = {**saved, "options": f"-c role={role}"}
    try:
        yield role
    finally:
        db.close()
        db.settings_dict["OPTIONS"] = saved
        with db.cursor() as cursor:
            cursor.execute(f"DROP ROLE {role}")


def test_a_refusal_that_is_not_a_missing_table_is_reported_in_the_databases_words(
    postgres_without_privileges: str,
) -> None:
    [figures] = status.collect("postgres", ["default"])
    assert figures.queues == []
    assert figures.error == "ProgrammingError: permission denied for table kinetis_queue_jobs"
