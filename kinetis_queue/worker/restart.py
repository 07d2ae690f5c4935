"""The restart marker: ``queue_restart`` moves a connection's generation, its workers exit after their job.

Every worker reads its connection's generation when it starts, then again between jobs (at most
once a second while busy) and after every empty poll; once the value moved it finishes the job it
is running and exits with the reason ``restart``. Whatever supervises it (systemd, a container
runtime) then starts a worker with the new code.

The marker must be visible to workers on every host. By default it is a row in the database
(model RestartMarker). A backend that has a shared store of its own can keep it there instead by
defining ``restart_marker() -> RestartMarker`` on its Queue class (the Redis backend keeps a key
next to its queues: backends/redis/restart.py); ``marker_for()`` prefers that hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from django.db import IntegrityError, router, transaction
from django.db.models import F

if TYPE_CHECKING:
    from kinetis_queue.contracts import Queue


class RestartMarker(Protocol):
    """A generation number shared by every worker of one connection."""

    def read(self) -> int:
        """The current generation (0 when never moved)."""
        ...

    def bump(self) -> int:
        """Move the generation forward; return the new value."""
        ...


class DatabaseRestartMarker:
    """The generation of ``connection`` in the table kinetis_queue_restart_markers."""

    def __init__(self, connection: str) -> None:
        self.connection = connection

    def read(self) -> int:
        from kinetis_queue.models import RestartMarker as Row

        value = Row.objects.filter(connection=self.connection).values_list("generation", flat=True).first()
        return int(value or 0)

    def bump(self) -> int:
        from kinetis_queue.models import RestartMarker as Row

        alias = router.db_for_write(Row)
        rows = Row.objects.using(alias)
        with transaction.atomic(using=alias):
            if not rows.filter(connection=self.connection).update(generation=F("generation") + 1):
                try:
                    with transaction.atomic(using=alias):
                        rows.create(connection=self.connection, generation=1)
                except IntegrityError:  # created meanwhile by a concurrent queue_restart
                    rows.filter(connection=self.connection).update(generation=F("generation") + 1)
            return int(rows.get(connection=self.connection).generation)


def has_own_marker(queue_class: type[Queue]) -> bool:
    """True when the backend keeps its restart marker in its own store."""
    return callable(getattr(queue_class, "restart_marker", None))


def marker_for(queue: Queue | None, connection: str) -> RestartMarker:
    """The marker workers of ``connection`` read: the backend's own when it has one, else the database's."""
    if queue is not None and has_own_marker(type(queue)):
        marker: RestartMarker = queue.restart_marker()  # type: ignore[attr-defined]
        return marker
    return DatabaseRestartMarker(connection)
