"""Periodic jobs (issue 15, "Schedules"): declared in KINETIS_QUEUE["SCHEDULE"] or with ``@schedule``,
fired by a ``Scheduler`` so that each (schedule, tick) is pushed once whatever the number of schedulers.

See docs/schedules.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kinetis_queue.schedules.declaration import Schedule, ScheduleConfigurationError, schedule

if TYPE_CHECKING:
    from kinetis_queue.schedules.scheduler import Scheduler

__all__ = ["Schedule", "ScheduleConfigurationError", "Scheduler", "schedule"]


def __getattr__(name: str) -> Any:
    # The Scheduler imports the connections (and so the backends' option modules): loaded on first use,
    # so that a jobs module importing @schedule stays light.
    if name == "Scheduler":
        from kinetis_queue.schedules.scheduler import Scheduler

        return Scheduler
    raise AttributeError(name)
