"""queue_restart's marker bump racing another's first bump on PostgreSQL: both bumps count.

The first bump of a connection inserts its row. When another transaction inserted it first and has not
committed, this bump's UPDATE sees no row, its INSERT waits on the unique key, then fails once the other
commits; the bump then increments the row the other created instead of losing its restart.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from django.db import connections, transaction
from django.test import override_settings

from kinetis_queue.models import RestartMarker
from kinetis_queue.worker.restart import DatabaseRestartMarker
from tests.support.helpers import wait_until


class MarkersOnPostgres:
    """Routes the restart markers to the PostgreSQL database, where an insert waits on a concurrent one."""

    def db_for_read(self, model: type, **hints: Any) -> str | None:
        return "postgres" if model is RestartMarker else None

    def db_for_write(self, model: type, **hints: Any) -> str | None:
        return "postgres" if model is RestartMarker else None


def _waiting_on_a_lock() -> bool:
    with connections["postgres"].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE %s",
            ["%kinetis_queue_restart_markers%"],
        )
        return bool(cursor.fetchone()[0])


def _release_once_waiting(release: threading.Event) -> None:
    try:
        wait_until(_waiting_on_a_lock)
    finally:
        release.set()
        connections.close_all()  # this thread's own connections, or the test database cannot be dropped


def test_a_bump_racing_a_concurrent_first_bump_increments_the_row_the_other_created() -> None:
    name = "r" + uuid.uuid4().hex[:12]
    inserted, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def first_bump() -> None:
        try:
            with transaction.atomic(using="postgres"):
                RestartMarker.objects.using("postgres").create(connection=name, generation=1)
                inserted.set()
                release.wait(30)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    with override_settings(DATABASE_ROUTERS=[f"{__name__}.MarkersOnPostgres"]):
        other = threading.Thread(target=first_bump)
        other.start()
        try:
            assert inserted.wait(30)
            watcher = threading.Thread(target=_release_once_waiting, args=(release,))
            watcher.start()
            generation = DatabaseRestartMarker(name).bump()
            watcher.join(30)
        finally:
            release.set()
            other.join(30)
        assert errors == []
        assert generation == 2
        assert DatabaseRestartMarker(name).read() == 2
        RestartMarker.objects.using("postgres").filter(connection=name).delete()
