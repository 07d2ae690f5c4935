"""The restart marker of a Redis connection, kept on its own server next to its queues' keys."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kinetis_queue.backends.redis.client import RedisClient
    from kinetis_queue.backends.redis.cluster import ClusterClient


class RedisRestartMarker:
    """A connection's restart generation as one Redis integer key: ``GET`` to read, ``INCR`` to bump.

    Every worker of the connection reads the same server, wherever it runs, so ``queue_restart``
    reaches them without the database (kinetis_queue.worker.restart). A missing key is generation 0.
    """

    def __init__(self, client: RedisClient | ClusterClient, key: str) -> None:
        self._client = client
        self.key = key

    def read(self) -> int:
        value = self._client.execute("GET", self.key, what="restart marker read")
        return 0 if value is None else int(value)

    def bump(self) -> int:
        # INCR is atomic, so two concurrent queue_restart runs both move the generation.
        return int(self._client.execute("INCR", self.key, what="restart marker bump"))
