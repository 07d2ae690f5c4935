"""A backend whose acks fail: the worker's infrastructure-failure path (exit reason "error")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

from kinetis_queue.backends.sql import SqlQueue
from kinetis_queue.conf import ConnectionSettings
from kinetis_queue.contracts import QueuedJob


class BrokenAck(SqlQueue):
    """The SQL backend, except that every ack (single or batched) raises as a lost database would."""

    @classmethod
    def from_settings(cls, settings: ConnectionSettings) -> Self:
        return cls(
            database=settings.options.get("DATABASE", "default"),
            visibility_timeout=settings.visibility_timeout,
            connection=settings.name,
        )

    def ack(self, job: QueuedJob, *args: Any) -> None:
        raise ConnectionError("the job store went away")

    def _ack_many(self, jobs: Sequence[QueuedJob]) -> Any:
        raise ConnectionError("the job store went away")
