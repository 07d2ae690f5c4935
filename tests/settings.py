"""Settings for the test suite: one Django project with a database alias per SQL backend.

Test databases are created by pytest-django. A worker started as a subprocess by a test gets
KINETIS_TESTS_SUBPROCESS=1 and then points each alias straight at the test database.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

SUBPROCESS = os.environ.get("KINETIS_TESTS_SUBPROCESS") == "1"
#: Test databases are named per run, so two runs on one machine never drop each other's; worker
#: subprocesses inherit the variable and so find the same databases.
RUN_ID = os.environ.setdefault("KINETIS_TESTS_RUN_ID", str(os.getpid()))
SQLITE_TEST_FILE = str(Path(tempfile.gettempdir()) / f"kinetis_queue_test_{RUN_ID}.sqlite3")
PG_TEST_NAME = f"test_kinetis_queue_{RUN_ID}"
MARIADB_TEST_NAME = f"test_kinetis_queue_{RUN_ID}"

SECRET_KEY = "kinetis-queue-tests"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "kinetis_queue",
    "tests",
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": SQLITE_TEST_FILE if SUBPROCESS else str(Path(tempfile.gettempdir()) / "kinetis_queue.sqlite3"),
        "TEST": {"NAME": SQLITE_TEST_FILE},
        "OPTIONS": {"timeout": 20},
    },
    "postgres": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": PG_TEST_NAME if SUBPROCESS else "test",
        "USER": "postgres",
        "HOST": "127.0.0.1",
        "PORT": "5432",
        "TEST": {"NAME": PG_TEST_NAME},
    },
    "mariadb": {
        "ENGINE": "django.db.backends.mysql",
        "NAME": MARIADB_TEST_NAME if SUBPROCESS else "test",
        "USER": "root",
        "HOST": "127.0.0.1",
        "PORT": "3306",
        "OPTIONS": {"charset": "utf8mb4"},
        "TEST": {"NAME": MARIADB_TEST_NAME, "CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"},
    },
}

KINETIS_QUEUE = {
    "DEFAULT_CONNECTION": "sqlite",
    "CONNECTIONS": {
        "sync": {"BACKEND": "sync"},
        "sqlite": {"BACKEND": "sql", "DATABASE": "default", "VISIBILITY_TIMEOUT": 1},
        "postgres": {"BACKEND": "sql", "DATABASE": "postgres", "VISIBILITY_TIMEOUT": 1},
        "mariadb": {"BACKEND": "sql", "DATABASE": "mariadb", "VISIBILITY_TIMEOUT": 1},
    },
    "POLL_TIMEOUT": 1,
}

# django.tasks (Django 6): @task functions in tests/task_defs.py run through the sqlite connection.
TASKS = {
    "default": {
        "BACKEND": "kinetis_queue.tasks.KinetisTaskBackend",
        "QUEUES": [],
        "OPTIONS": {"CONNECTION": "sqlite"},
    }
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"kinetis_queue": {"handlers": ["stderr"], "level": "INFO"}},
}
