"""The job classes of tests/faults/test_fuzz.py, in a module of their own: it is in KINETIS_QUEUE["IMPORTS"], so
every worker subprocess of the suite imports it at start-up, and the test module would bring Hypothesis and
pytest with it (about 0.4 s of CPU per worker started)."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Annotated, Any

from kinetis_queue import Job, Sensitive


class Shade(Enum):
    LIGHT = "light"
    DARK = "dark"


class Size(Enum):
    SMALL = 1
    LARGE = 2


#: Jobs a sync push ran, in this process.
RAN: list[Job] = []


class Payload(Job):
    """Any JSON value, plus the two kinds restored from annotations."""

    def __init__(
        self, value: Any, shade: Shade = Shade.LIGHT, size: Size | None = None, at: datetime | None = None
    ) -> None:
        self.value = value
        self.shade = shade
        self.size = size
        self.at = at

    def handle(self) -> None:
        RAN.append(self)


class Guarded(Job):
    """A plain argument and a Sensitive one."""

    def __init__(self, note: Any = None, token: Annotated[Any, Sensitive] = None) -> None:
        self.note = note
        self.token = token

    def handle(self) -> None:
        RAN.append(self)
