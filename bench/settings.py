"""Django settings for the benchmark: one database alias and one SQL queue connection per database.

The benchmark measures the project as most users run it, so the DATABASES entries carry Django's
defaults: no ``CONN_MAX_AGE`` (0, a new connection per request/job cycle) and no health checks.
The worker must hold its own connection whatever that setting says (see SqlQueue._worker_db);
running with the default is what makes this benchmark catch a reconnect per job.

PostgreSQL and MariaDB use a database of their own, ``kinetis_bench``, created on first run by
``create_databases()`` (plain drivers, no Django); SQLite uses a file in the temp directory.
This module only defines constants and that helper: importing it needs no Django set-up, so the
bare driver loops (bench/bare.py) read their connection parameters from here too.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

#: KINETIS_BENCH_DB overrides it, so a run can keep a database of its own (stale statistics need one).
BENCH_DB_NAME = os.environ.get("KINETIS_BENCH_DB", "kinetis_bench")
SQLITE_FILE = str(Path(tempfile.gettempdir()) / f"{BENCH_DB_NAME}.sqlite3")

SECRET_KEY = "kinetis-queue-bench"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "kinetis_queue",
    "bench",
]

DATABASES: dict[str, dict[str, Any]] = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": SQLITE_FILE,
    },
    "postgres": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": BENCH_DB_NAME,
        "USER": "postgres",
        "HOST": "127.0.0.1",
        "PORT": "5432",
    },
    "mariadb": {
        "ENGINE": "django.db.backends.mysql",
        "NAME": BENCH_DB_NAME,
        "USER": "root",
        "HOST": "127.0.0.1",
        "PORT": "3306",
        "OPTIONS": {"charset": "utf8mb4"},
    },
}

#: Benchmark backend name -> (KINETIS_QUEUE connection, DATABASES alias).
BACKENDS: dict[str, tuple[str, str]] = {
    "sql-postgres": ("postgres", "postgres"),
    "sql-mariadb": ("mariadb", "mariadb"),
    "sql-sqlite": ("sqlite", "default"),
}

KINETIS_QUEUE = {
    "DEFAULT_CONNECTION": "sqlite",
    "CONNECTIONS": {
        "sqlite": {"BACKEND": "sql", "DATABASE": "default"},
        "postgres": {"BACKEND": "sql", "DATABASE": "postgres"},
        "mariadb": {"BACKEND": "sql", "DATABASE": "mariadb"},
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "loggers": {"kinetis_queue": {"level": "WARNING"}},
}


def create_databases(aliases: list[str]) -> None:
    """Create the PostgreSQL / MariaDB bench databases named by ``aliases`` when they are missing."""
    if "postgres" in aliases:
        import psycopg

        pg = DATABASES["postgres"]
        with psycopg.connect(
            host=pg["HOST"], port=int(pg["PORT"]), user=pg["USER"], dbname="postgres", autocommit=True
        ) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [BENCH_DB_NAME]).fetchone()
            if exists is None:
                conn.execute(f'CREATE DATABASE "{BENCH_DB_NAME}"')
    if "mariadb" in aliases:
        import MySQLdb

        my = DATABASES["mariadb"]
        conn = MySQLdb.connect(host=my["HOST"], port=int(my["PORT"]), user=my["USER"], charset="utf8mb4")
        try:
            conn.cursor().execute(
                f"CREATE DATABASE IF NOT EXISTS `{BENCH_DB_NAME}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
            )
        finally:
            conn.close()
