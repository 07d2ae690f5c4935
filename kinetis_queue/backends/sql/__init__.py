"""The SQL backend: ``queue.py`` holds SqlQueue, ``claim.py`` the claim query per database."""

from __future__ import annotations

from kinetis_queue.backends.sql.queue import SqlHandle, SqlQueue

__all__ = ["SqlHandle", "SqlQueue"]
