"""When ``Worker.run()`` stops on its own: ``once``, ``stop_when_empty``, ``max_jobs``, ``max_time``,
``memory`` and the restart marker (``queue_restart``). Limits are read between jobs, never during one."""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Final

from kinetis_queue.exceptions import InvalidQueueArgumentError
from kinetis_queue.outcomes import ExitReason

if TYPE_CHECKING:
    from kinetis_queue.worker.restart import RestartMarker

#: While busy, the restart marker is read at most this often (seconds); an idle worker reads it
#: after every empty poll. (The memory limit is read after every delivery: a /proc read, no I/O.)
CONTROL_CHECK_INTERVAL: Final = 1.0


def resident_memory_mb() -> float:
    """This process's resident memory in MB (Linux: current; elsewhere: the peak, all it can tell)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 1_048_576
    except (OSError, ValueError, IndexError):  # pragma: no cover - no /proc (not Linux): the peak instead
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 1_048_576 if sys.platform == "darwin" else peak / 1024


def positive_limit(value: object, what: str) -> None:
    """Reject a limit that is neither None nor a positive finite number, naming it."""
    if value is not None and (type(value) not in (int, float) or not 0 < value < float("inf")):  # type: ignore[operator]
        raise InvalidQueueArgumentError(f"{what} must be None or a positive number")


class RunLimits:
    """The limits of one ``run()``: validated when built, started with the loop, read after each poll."""

    def __init__(
        self,
        *,
        stop_when_empty: bool,
        once: bool,
        max_jobs: int | None,
        max_time: float | None,
        memory: float | None,
        restart: RestartMarker | None,
    ) -> None:
        if max_jobs is not None and (type(max_jobs) is not int or max_jobs < 1):
            raise InvalidQueueArgumentError("max_jobs must be None or a positive int")
        positive_limit(max_time, "max_time")
        positive_limit(memory, "memory")
        self.stop_when_empty = stop_when_empty
        self.once = once
        self.max_jobs = max_jobs
        self.max_time = max_time
        self.memory = memory
        self.restart = restart
        self._generation: int | None = None
        self._deadline: float | None = None
        self._next_check = 0.0

    def start(self) -> None:
        """Read the restart marker and start the clock: the loop begins now."""
        self._generation = self.restart.read() if self.restart is not None else None
        started = time.monotonic()
        self._deadline = None if self.max_time is None else started + self.max_time
        self._next_check = started + CONTROL_CHECK_INTERVAL

    def poll_wait(self, timeout: float) -> float:
        """How long the next pop may wait: an idle worker does not outstay max_time by a whole poll."""
        if self._deadline is None:
            return timeout
        return min(timeout, max(self._deadline - time.monotonic(), 0.001))

    def reached(self, found: bool, processed: int, stopping: bool) -> ExitReason | None:
        """Why the loop stops after a poll that ``found`` a delivery or not, with ``processed`` deliveries
        since start() and ``stopping`` as the worker's stop flag; None to go on."""
        if self.once:
            return ExitReason.COMPLETED if found else ExitReason.EMPTY
        if self.max_jobs is not None and processed >= self.max_jobs:
            return ExitReason.MAX_JOBS
        if not found and self.stop_when_empty:
            return ExitReason.EMPTY
        if stopping:
            return ExitReason.SHUTDOWN
        if self._deadline is not None and time.monotonic() >= self._deadline:
            return ExitReason.MAX_TIME
        if self.memory is not None and resident_memory_mb() >= self.memory:
            return ExitReason.MEMORY
        return self._restarted(found)

    def _restarted(self, found: bool) -> ExitReason | None:
        if self.restart is None:
            return None
        now = time.monotonic()
        if found and now < self._next_check:
            return None  # a busy worker reads the marker at most once per CONTROL_CHECK_INTERVAL
        self._next_check = now + CONTROL_CHECK_INTERVAL
        return ExitReason.RESTART if self.restart.read() != self._generation else None
