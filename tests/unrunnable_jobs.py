"""Job classes no worker can run, for check E005 (tests/operator/test_discovery.py lists this module in IMPORTS)."""

from __future__ import annotations

from django.db import models

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


class UniqueForever(Job):
    """E007: unique_for beyond 30 days."""

    unique_for = 90 * 86_400

    def handle(self) -> None:
        pass


class DebounceWhileRunning(Job):
    """E007: debounce without unique_until "started"."""

    unique_for = 60
    unique_debounce = True

    def handle(self) -> None:
        pass


class ScopeWithoutLifetime(Job):
    """E007: a scope without unique_for."""

    unique_until = "started"

    def handle(self) -> None:
        pass


class UniqueAndFine(Job):
    unique_for = 60
    unique_until = "expired"

    def handle(self) -> None:
        pass


class AnyModelArgument(Job):
    """E010: a parameter annotated with the generic models.Model (a payload could load any model's row)."""

    def __init__(self, instance: models.Model) -> None:
        self.instance = instance

    def handle(self) -> None:
        pass


class StarArguments(Job):
    """E010: *args cannot be stored."""

    def __init__(self, *items: int) -> None:
        self.items = items

    def handle(self) -> None:
        pass
