"""The table checks leave an unreachable database to the work that needs it: no false "run migrate"."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import DatabaseError
from django.db import connections as db_connections

from kinetis_queue import connections
from kinetis_queue.conf.checks import check_tables
from kinetis_queue.contracts import DisposableQueue
from kinetis_queue.db import tables


def closed_port() -> int:
    """A local port nothing listens on (bound, then released): a connection there is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def unreachable(alias: str, **changes: Any) -> Iterator[None]:
    """Point Django's ``alias`` at a place no database answers, then put it back."""
    db = db_connections[alias]
    saved = dict(db.settings_dict)
    db.close()
    db.settings_dict.update(changes)
    try:
        yield
    finally:
        db.close()
        db.settings_dict.clear()
        db.settings_dict.update(saved)


def test_check_tables_skips_a_database_it_cannot_reach() -> None:
    with unreachable("postgres", PORT=str(closed_port())):
        with pytest.raises(DatabaseError):
            db_connections["postgres"].ensure_connection()  # the fault is real
        assert check_tables(databases=["postgres"]) == []
    assert check_tables(databases=["postgres"]) == []  # reachable and migrated: still nothing to say


def test_require_for_leaves_an_unreachable_jobs_database_to_the_worker() -> None:
    """queue_work's start-up check does not call a database it cannot reach unmigrated."""
    with unreachable("postgres", PORT=str(closed_port())):
        queue = connections.build("postgres")
        try:
            tables.require_for(queue)  # no QueueTablesMissingError
            with pytest.raises(DatabaseError):
                queue.missing_tables()  # type: ignore[attr-defined]
        finally:
            if isinstance(queue, DisposableQueue):
                queue.dispose()


def test_require_for_leaves_an_unreachable_failed_jobs_database_to_the_command(tmp_path: Any) -> None:
    with unreachable("default", NAME=str(tmp_path / "absent-dir" / "db.sqlite3")):
        with pytest.raises(DatabaseError):
            db_connections["default"].ensure_connection()
        tables.require_for(None)  # no QueueTablesMissingError
