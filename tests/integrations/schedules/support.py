"""Helpers of the schedule tests: schedules built through the real validation, with unique names."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings
from django.test import override_settings

from kinetis_queue.schedules import declaration
from kinetis_queue.schedules.declaration import Schedule


def unique(prefix: str = "s") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@contextmanager
def declared(**entries: dict[str, Any]) -> Iterator[None]:
    """KINETIS_QUEUE["SCHEDULE"] set to ``entries`` for the block (the rest of the setting kept)."""
    with override_settings(KINETIS_QUEUE={**settings.KINETIS_QUEUE, "SCHEDULE": entries}):
        yield


def build(name: str | None = None, **entry: Any) -> Schedule:
    """One schedule validated as KINETIS_QUEUE["SCHEDULE"][name] = entry (JOB defaults to tests.jobs.Records)."""
    name = name or unique()
    entry.setdefault("JOB", "tests.jobs.Records")
    entry.setdefault("ARGS", {"label": name})
    with declared(**{name: entry}):
        (found,) = [s for s in declaration.load() if s.name == name]
    return found


def at(text: str, zone: str = "UTC") -> float:
    """Unix seconds of a local wall time ``YYYY-MM-DD HH:MM`` in ``zone`` (the first one when it repeats)."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M").replace(tzinfo=ZoneInfo(zone)).timestamp()


def local(tick: float, zone: str) -> str:
    """A tick as local wall time with its UTC offset: ``2026-03-29 03:00+02:00``."""
    return datetime.fromtimestamp(tick, ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M%z")
