"""Job classes push() must refuse, kept out of KINETIS_QUEUE["IMPORTS"] so that ``manage.py check`` passes
on tests.settings (E005/E010 inspect the classes of discovery modules): the tests that push them import
them from here, and their own modules, listed in IMPORTS, hold only runnable classes."""

from __future__ import annotations

from typing import Any

from kinetis_queue import Job
from tests import jobs


class NamesAMissingType(Job):
    """A handle() hint that names nothing importable: the job cannot run, and says why."""

    def handle(self, context: NoSuchType) -> None:  # type: ignore[name-defined]  # noqa: F821
        jobs.CALLS.append(("NamesAMissingType",))


class StarArgs(Job):
    def __init__(self, *items: Any) -> None:
        self.items = items


class Forgetful(Job):
    def __init__(self, value: Any) -> None:
        self.kept = value


class NoHandle(Job):
    def __init__(self, token: str = "") -> None:
        self.token = token


class CountingHandle(Job):
    def __init__(self, token: str = "") -> None:
        self.token = token

    def handle(self, count: int) -> None:  # type: ignore[override]  # the worker cannot pass it
        jobs.CALLS.append(("CountingHandle",))


#: A class path over 255 characters, more than any backend stores.
LongNamedJob = type("LongNamed" + "x" * 250, (Job,), {"handle": lambda self: None, "__module__": __name__})


class Undiscovered(Job):
    """Runnable, but in a module no worker imports at start-up (not a jobs module, not in IMPORTS)."""

    def __init__(self, token: str = "") -> None:
        self.token = token

    def handle(self) -> None:
        jobs.CALLS.append(("Undiscovered",))
