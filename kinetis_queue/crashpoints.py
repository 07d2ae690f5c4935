"""Named crash points for the fault tests (RELIABILITY.md §2.2): off unless ``KQ_CRASHPOINT`` is set.

``KQ_CRASHPOINT=name[:n]`` ends the process with ``os._exit(137)`` (what a SIGKILL looks like to
a supervisor) the ``n``-th time ``reach(name)`` runs, ``n`` defaulting to 1. Nothing is flushed and
no ``finally`` runs, so "no job is lost by a crash at this point" becomes a test. The variable is
read once, at import; when it is unset, ``reach()`` costs one module-level None check.
"""

from __future__ import annotations

import os
import threading
from typing import Final

#: The exit status a crash point ends the process with (128 + SIGKILL).
EXIT_CODE: Final = 137


def _parse(value: str | None) -> tuple[str, int] | None:
    if not value:
        return None
    name, _, nth = value.partition(":")
    if not name or (nth and not (nth.isdigit() and int(nth) >= 1)):
        raise ValueError("KQ_CRASHPOINT must be NAME or NAME:N with N a positive integer")
    return name, int(nth) if nth else 1


_TARGET: Final = _parse(os.environ.get("KQ_CRASHPOINT"))
_reached = 0
_lock = threading.Lock()


def reach(name: str) -> None:
    """Crash here if ``KQ_CRASHPOINT`` names this point and this is its n-th reach; else do nothing."""
    if _TARGET is None:
        return
    _count(name, _TARGET)


def _count(name: str, target: tuple[str, int]) -> None:
    global _reached
    if name != target[0]:
        return
    with _lock:
        _reached += 1
        if _reached == target[1]:
            os._exit(EXIT_CODE)
