"""Settings for running Django's own ``tests/tasks`` suite (from Django's sdist) against KinetisTaskBackend.

scripts/django-task-tests.sh downloads the sdist and puts its ``tests/`` directory on PYTHONPATH, so
Django's test package ``tasks`` is importable; it is installed as an app so a worker could import it.
KINETIS_UPSTREAM_CONNECTION picks the KINETIS_QUEUE connection the backend pushes through.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

SECRET_KEY = "kinetis-queue-upstream-tests"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "kinetis_queue", "tasks"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(Path(tempfile.gettempdir()) / "kinetis_upstream.sqlite3"),
        "TEST": {"NAME": str(Path(tempfile.gettempdir()) / f"kinetis_upstream_test_{os.getpid()}.sqlite3")},
    }
}
KINETIS_QUEUE = {
    "DEFAULT_CONNECTION": os.environ.get("KINETIS_UPSTREAM_CONNECTION", "sqlite"),
    "CONNECTIONS": {
        "sqlite": {"BACKEND": "sql", "DATABASE": "default"},
        "redis": {"BACKEND": "redis", "URL": "redis://127.0.0.1:6379/0", "PREFIX": f"kq-upstream-{os.getpid()}"},
    },
}
TASKS = {"default": {"BACKEND": "kinetis_queue.tasks.KinetisTaskBackend", "QUEUES": ["default", "queue_1"]}}
