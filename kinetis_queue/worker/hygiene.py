"""Django connection hygiene around each job, as Django's request cycle does around each request.

After a job (and before the next one, unless the last pass was moments ago) every initialized
database connection is checked: a transaction the job left open is rolled back, and a connection
that is unusable or older than ``CONN_MAX_AGE`` is closed.

This module touches Django's PRIVATE connection attributes (``BaseDatabaseWrapper.in_atomic_block``,
``savepoint_ids``, ``atomic_blocks``, ``needs_rollback``, ``closed_in_transaction``,
``commit_on_exit``, ``run_on_commit``, ``connection``): an ``atomic()`` block the job entered and
never exited cannot be ended through a public API. tests/specific/test_hygiene.py pins those
attributes on every supported Django; a Django upgrade that changes them fails that test first.
"""

from __future__ import annotations

from typing import Any, Final

from django.db import connections

from kinetis_queue.worker.log import contained, logger

#: A job starting within this many seconds of the previous job's connection hygiene skips its
#: own opening pass: in between, only time can make a connection obsolete (CONN_MAX_AGE), and
#: Django's own request cycle is as loose. After an idle poll the pass runs again.
HYGIENE_FRESH_FOR: Final = 1.0


def reset_connections() -> None:
    """Django's per-request hygiene around a job: no transaction left open, stale connections closed."""
    for db in connections.all(initialized_only=True):
        if db.in_atomic_block:
            contained(logger.error, "A job left a transaction open on database %r; rolling it back", db.alias)
            abandon_transaction(db)
        db.close_if_unusable_or_obsolete()


def abandon_transaction(db: Any) -> None:
    """End the ``atomic()`` blocks a job left open on ``db``: roll back, then reset the wrapper's private
    transaction state to what it is outside any block (closing the connection if either step fails)."""
    try:
        db.rollback()
    except Exception:
        _close(db)
    db.in_atomic_block = False
    db.savepoint_ids = []
    db.atomic_blocks = []
    db.needs_rollback = False
    db.closed_in_transaction = False
    db.commit_on_exit = True
    db.run_on_commit = []
    try:
        db.set_autocommit(db.settings_dict["AUTOCOMMIT"])
    except Exception:
        _close(db)
        db.connection = None


def _close(db: Any) -> None:
    """Close ``db``'s connection; an error doing so is dropped: MySQLdb refuses to close a connection
    already closed (OperationalError 2006), and hygiene must leave a usable wrapper, not raise."""
    try:
        db.close()
    except Exception:  # noqa: S110
        pass
