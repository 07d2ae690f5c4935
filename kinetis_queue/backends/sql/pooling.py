"""Transaction pooling (PgBouncer's ``pool_mode = transaction``): the session state the SQL backend gives up.

Such a pooler lends a server connection for one transaction at a time, so nothing that lives in a
session survives from one transaction to the next, and what one client leaves in a session reaches
whichever client is lent that server connection next. Behind it the backend keeps to single
statements and transactions, and drops its three session features:

- LISTEN: a notification goes to the server session that listened, which the pooler has since lent
  to someone else. Idle workers and outbox relays poll instead (the database's polling pause, as on
  MySQL); pushes still NOTIFY, for workers that reach the same database directly.
- The worker connection's ``SET`` commands (asynchronous commit, no sequential scans): a session
  setting would leak to other clients of the pool (their pushes would commit asynchronously).
  Set them on the worker's database role instead (docs/backends/pgbouncer.md).
- The prepared push INSERT: a named prepared statement lives in one server session.

An alias is taken as pooled when its DATABASES entry sets ``DISABLE_SERVER_SIDE_CURSORS = True``:
Django's own setting for a transaction pooler (a server-side cursor is session state too), which such
a project needs anyway, so the one setting covers both.
"""

from __future__ import annotations

from django.db import connections


def transaction_pooled(alias: str) -> bool:
    """Whether the database alias reaches PostgreSQL through a transaction pooler (see the module docstring)."""
    db = connections[alias]
    return db.vendor == "postgresql" and bool(db.settings_dict.get("DISABLE_SERVER_SIDE_CURSORS"))
