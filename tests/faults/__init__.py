"""The fault tier (RELIABILITY.md): history and checker, crash points, a fault proxy, and the scenarios."""

from __future__ import annotations
