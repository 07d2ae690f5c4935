"""tests.settings on a database where ``migrate`` never ran: an empty SQLite file named by
KINETIS_TESTS_EMPTY_DB (tests/operator/test_tables.py), with one sql connection on it."""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES as _DATABASES

DATABASES = {
    **_DATABASES,
    "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["KINETIS_TESTS_EMPTY_DB"]},
}
KINETIS_QUEUE = {
    "DEFAULT_CONNECTION": "sqlite",
    "CONNECTIONS": {"sqlite": {"BACKEND": "sql", "DATABASE": "default"}},
    "IMPORTS": ["tests.task_defs"],  # the @task functions of tests/operator/test_forgotten_migrate.py
}
LOGGING = {"version": 1, "disable_existing_loggers": False}
