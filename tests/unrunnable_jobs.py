"""Job classes no worker can run, for check E005 (tests/operator/test_discovery.py lists this module in IMPORTS)."""

from __future__ import annotations

from kinetis_queue import Job, JobContext


class NoHandle(Job):
    """Defines no handle() and has no subclass: E005."""


class CountingHandle(Job):
    def handle(self, count: int) -> None:  # type: ignore[override]  # E005: the worker cannot pass it
        pass


class Base(Job):
    """A base class without handle(): not reported, its subclass is what gets pushed."""


class Child(Base):
    def handle(self, context: JobContext) -> None:
        pass
