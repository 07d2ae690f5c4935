"""The SQL backend's connection keys (``"BACKEND": "sql"``), checked by conf.py before anything is built."""

from __future__ import annotations

from typing import Any, Final

from django.conf import settings

from kinetis_queue.backends.sql.timeouts import DEFAULT_OPERATION_TIMEOUT
from kinetis_queue.contracts import SWEEP_PAUSE
from kinetis_queue.schema import BackendOptions, BuiltinBackend, KeyPath, Option, boolean, fail, number, optional

#: What is wrong with a DATABASE that is not an alias in DATABASES (the system check adds the known ones).
UNKNOWN_ALIAS: Final = "must name an alias in DATABASES"


def _database(value: Any, path: KeyPath) -> None:
    if type(value) is not str or value not in settings.DATABASES:
        raise fail(path, UNKNOWN_ALIAS)


OPTIONS = BackendOptions(
    (
        #: The database alias holding the jobs table.
        Option("DATABASE", "default", _database),
        #: Whether psycopg prepares the push INSERT (off behind a transaction-pooling PgBouncer).
        Option("PREPARED_STATEMENTS", True, boolean),
        #: PostgreSQL: whether the worker's connection sets its session settings (queue.py WORKER_SESSION);
        #: None: only when that connection is a server session of its own (pooling.py ``owns_its_session``).
        Option("SESSION_SETTINGS", None, optional(boolean)),
        #: Seconds one worker-side call may take (see timeouts.py).
        Option("OPERATION_TIMEOUT", DEFAULT_OPERATION_TIMEOUT, number(0, low_open=True)),
        #: Seconds an idle worker pauses between two empty claims (queue.py ``default_poll_pause``);
        #: None: the database's default. At most SWEEP_PAUSE, the contract's longest pause.
        Option("POLL_PAUSE", None, optional(number(0, SWEEP_PAUSE, low_open=True))),
    )
)
#: This backend, as conf finds it (kinetis_queue.conf.builtin_backends).
BACKEND = BuiltinBackend("sql", "kinetis_queue.backends.sql.SqlQueue", OPTIONS)
