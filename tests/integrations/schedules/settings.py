"""tests.settings plus KINETIS_QUEUE["SCHEDULE"] read from KQ_TEST_SCHEDULE (JSON): the scheduler subprocesses'."""

from __future__ import annotations

import json
import os

from tests.settings import *  # noqa: F403
from tests.settings import KINETIS_QUEUE as _BASE

KINETIS_QUEUE = {**_BASE, "SCHEDULE": json.loads(os.environ.get("KQ_TEST_SCHEDULE", "{}"))}
