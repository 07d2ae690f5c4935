"""A small Django project for the demo (SQLite, no service needed) and the tests."""

from __future__ import annotations

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = "kinetis-queue-testproject-not-secret"
# A local demo: `runserver` serves the admin's static files and answers on loopback only.
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "kinetis_queue",
    "demo",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
ROOT_URLCONF = "testproject.urls"
STATIC_URL = "static/"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("KINETIS_DEMO_DB", str(BASE_DIR / "demo.sqlite3")),
    }
}

KINETIS_QUEUE = {
    "DEFAULT_CONNECTION": "default",
    "CONNECTIONS": {"default": {"BACKEND": "sql", "DATABASE": "default"}},
    "MAX_ATTEMPTS": 3,
    "RETRY_BASE_DELAY": 1,
    "POLL_TIMEOUT": 1,
}

# The worker's own log lines, shown inline in the demo's output.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "         log: %(levelname)s %(message)s"}},
    "handlers": {"stdout": {"class": "logging.StreamHandler", "stream": "ext://sys.stdout", "formatter": "plain"}},
    "loggers": {"kinetis_queue": {"handlers": ["stdout"], "level": "WARNING", "propagate": False}},
}
