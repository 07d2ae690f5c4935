"""tests.settings for operator subprocess tests: no project logging (so queue_work's -v levels show), and a
connection whose ack() always fails (an infrastructure failure, for the worker's "error" exit)."""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import KINETIS_QUEUE as _BASE

KINETIS_QUEUE = {
    **_BASE,
    "CONNECTIONS": {
        **_BASE["CONNECTIONS"],
        "brokenack": {"BACKEND": "tests.operator_backends.BrokenAck", "DATABASE": "default", "VISIBILITY_TIMEOUT": 1},
    },
}
LOGGING = {"version": 1, "disable_existing_loggers": False}
