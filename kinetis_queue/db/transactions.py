"""A transaction that reads a row and then writes it, safe beside other writers on SQLite.

SQLite lets a reader's transaction become a writer only if no other connection holds the write lock;
when one does, it fails at once with "database is locked" rather than waiting the busy timeout (its
rule against deadlock). A worker's own threads (the registry, the history, a slot's renewal) and other
workers write the same file, so a read-then-write such as "lock the result row, then save it" must take
the write lock at BEGIN. ``write_atomic()`` does so through the SQLite wrapper's ``transaction_mode``
(from ``OPTIONS["transaction_mode"]``, Django 5.1+), set for the one BEGIN of the outermost block.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections, transaction


@contextmanager
def write_atomic(alias: str) -> Iterator[None]:
    """``transaction.atomic(using=alias)``; on SQLite, outermost, it begins IMMEDIATE (waits for the lock)."""
    db: Any = connections[alias]  # the SQLite wrapper's transaction_mode is not in the base class's stubs
    if db.vendor != "sqlite" or db.in_atomic_block:
        with transaction.atomic(using=alias):
            yield
        return
    db.ensure_connection()
    mode = db.transaction_mode
    db.transaction_mode = "IMMEDIATE"
    try:
        with transaction.atomic(using=alias):
            db.transaction_mode = mode  # BEGIN IMMEDIATE was sent: nothing else of this connection changes
            yield
    finally:
        db.transaction_mode = mode
