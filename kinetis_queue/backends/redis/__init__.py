"""The Redis backend: ``queue.py`` holds RedisQueue, ``client.py`` the connection, one ``.lua`` per script."""

from __future__ import annotations

from kinetis_queue.backends.redis.queue import RedisHandle, RedisQueue

__all__ = ["RedisHandle", "RedisQueue"]
