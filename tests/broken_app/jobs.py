"""A discovery module that exists but fails to import: check E004 and queue_work report the real error."""

from __future__ import annotations

from tests.jobs import NoSuchName  # type: ignore[attr-defined]  # noqa: F401  (the failure under test)
