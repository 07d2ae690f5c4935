"""The conformance suite's parametrization table: one row per backend, traits quoting the spec.

A new backend adds one row here (and its connection in tests/settings.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backend:
    #: The test id: [sync], [sql-sqlite], ...
    id: str
    #: The KINETIS_QUEUE connection in tests/settings.py.
    connection: str
    #: The service a test of this backend needs ("" for none), named when it is down.
    service: str = ""
    #: False for sync: push() runs the job inline and nothing is stored.
    stores_jobs: bool = True
    #: Spec table "Fenced settlements": Redis and SQL only.
    fenced: bool = True
    #: False for SQS: "visibility timeout is best-effort".
    atomic_reserve: bool = True
    #: "timeout" (Redis, SQL, SQS) or "connection" (RabbitMQ: redelivered when the channel drops).
    recovers_by: str = "timeout"
    #: The Django database alias of an SQL backend.
    database: str | None = None


BACKENDS = [
    Backend("sync", "sync", stores_jobs=False, fenced=False, atomic_reserve=False, recovers_by="none"),
    Backend("sql-sqlite", "sqlite", database="default"),
    Backend("sql-postgres", "postgres", service="PostgreSQL at 127.0.0.1:5432", database="postgres"),
    Backend("sql-mariadb", "mariadb", service="MariaDB at 127.0.0.1:3306", database="mariadb"),
]

SQL_BACKENDS = [b for b in BACKENDS if b.database is not None]
