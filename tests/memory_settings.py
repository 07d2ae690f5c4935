"""tests.settings on an in-memory SQLite database (tests/specific/test_sql_memory.py), with one sql connection on it."""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES as _DATABASES

DATABASES = {**_DATABASES, "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
KINETIS_QUEUE = {"DEFAULT_CONNECTION": "sqlite", "CONNECTIONS": {"sqlite": {"BACKEND": "sql", "DATABASE": "default"}}}
LOGGING = {"version": 1, "disable_existing_loggers": False}
