"""tests.settings plus an installed app whose ``jobs`` module fails to import (tests/broken_app)."""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS as _APPS

INSTALLED_APPS = [*_APPS, "tests.broken_app"]
LOGGING = {"version": 1, "disable_existing_loggers": False}
