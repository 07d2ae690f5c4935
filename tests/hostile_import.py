"""A module inside an installed app whose import raises SystemExit: a stored class path naming it
makes the worker's import fail that way (issue 12, item 6)."""

from __future__ import annotations

raise SystemExit("this module refuses to be imported")
