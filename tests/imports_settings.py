"""tests.settings whose KINETIS_QUEUE["IMPORTS"] also lists tests.import_effects (imported at start-up)."""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import KINETIS_QUEUE as _BASE

KINETIS_QUEUE = {**_BASE, "IMPORTS": [*_BASE["IMPORTS"], "tests.import_effects"]}
LOGGING = {"version": 1, "disable_existing_loggers": False}
