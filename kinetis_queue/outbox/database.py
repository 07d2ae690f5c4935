"""The outbox writer: pushes become rows of ``kinetis_queue_outbox`` in the caller's transaction.

On PostgreSQL each write also NOTIFYs the connection's relay channel in the same statement, so a relay
waiting on it wakes when the transaction commits (never for one that rolls back).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any, Final

from django.db import connections, transaction

from kinetis_queue.conf import OutboxSettings
from kinetis_queue.contracts import PreparedPush, Queue
from kinetis_queue.outbox import Outbox

OUTBOX_TABLE: Final = "kinetis_queue_outbox"
INSERT_HEAD: Final = f"INSERT INTO {OUTBOX_TABLE} (connection, queue, job_id, envelope, pushed_at, due_at) VALUES "
ROW: Final = "(%s, %s, %s, %s, %s, %s)"
#: Rows per INSERT (6 parameters each; SQLite's floor is 999 parameters).
CHUNK: Final = 160


def channel(connection: str) -> str:
    """The PostgreSQL NOTIFY channel of a connection's relays (a digest: connection names are short, but
    the channel's form is the SQL backend's)."""
    return "kinetis_queue_outbox_" + hashlib.blake2b(connection.encode(), digest_size=16).hexdigest()


class DatabaseOutbox(Outbox):
    """A connection's outbox in database ``settings.database``."""

    def __init__(self, connection: str, settings: OutboxSettings) -> None:
        self.connection = connection
        self.database = settings.database
        self.settings = settings

    def captures(self) -> bool:
        return self.settings.always or connections[self.database].in_atomic_block

    def write(self, queue: Queue, prepared: Sequence[PreparedPush]) -> None:
        db = connections[self.database]
        rows = [
            [
                self.connection,
                item.queue,
                item.id,
                item.envelope.to_json(),
                item.envelope.pushed_at,
                item.envelope.pushed_at + item.delay,
            ]
            for item in prepared
        ]
        with transaction.atomic(using=self.database, savepoint=False), db.cursor() as cursor:
            for start in range(0, len(rows), CHUNK):
                part = rows[start : start + CHUNK]
                sql = INSERT_HEAD + ", ".join([ROW] * len(part))
                params: list[Any] = [value for row in part for value in row]
                if db.vendor == "postgresql":
                    sql += " RETURNING pg_notify(%s, '')"
                    params.append(channel(self.connection))
                cursor.execute(sql, params)
