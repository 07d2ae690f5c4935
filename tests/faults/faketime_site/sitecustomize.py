"""Loaded at start-up by a process tests/faults/procs.py runs under libfaketime (this directory is on its PYTHONPATH).

A host whose clock is off has a wrong wall clock and a true monotonic one, so procs.env() leaves the
monotonic clock real (``FAKETIME_DONT_FAKE_MONOTONIC=1``): with it faked, every timed wait of a thread
(``Lock.acquire(timeout=)``, ``Condition.wait()``, so the heartbeat's renewal timer) waits the skew on top,
an hour for a +1 h worker. libfaketime 0.9.10 then breaks ``time.sleep()`` alone: CPython's
``clock_nanosleep`` on an absolute monotonic deadline fails with EINVAL. This replaces it with a
``select()`` timeout, which is relative and unaffected.
"""

from __future__ import annotations

import os
import select
import time

if os.environ.get("FAKETIME_DONT_FAKE_MONOTONIC") == "1" and os.environ.get("LD_PRELOAD"):

    def _sleep(seconds: float) -> None:
        """time.sleep() on a select() timeout, resumed after a signal like the original."""
        seconds = float(seconds)
        if seconds < 0:
            raise ValueError("sleep length must be non-negative")
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            select.select([], [], [], left)

    time.sleep = _sleep
