"""Tick computation: when a schedule fires, and which missed ticks a catch-up policy fires.

A tick is an instant, held as whole Unix seconds (UTC): two schedulers on different hosts, or in
different local time zones, name the same tick by the same number, which is what the claim stores
key on. Cron expressions are read in the schedule's ``TIMEZONE`` by ``cronsim``, which follows
Debian cron's rules at daylight-saving changes:

- a local time that does not exist (spring forward: 02:30 on the night clocks go from 02:00 to
  03:00) fires once, at the first valid minute after the gap (03:00);
- a local time that happens twice (fall back: 02:30 when 03:00 goes back to 02:00) fires once, at
  its first occurrence, for an expression with a fixed hour; an expression whose hour field is a
  wildcard or a step (``*/30 * * * *``) fires in both passes, since it means "every 30 minutes of
  real time".

``EVERY`` ticks are multiples of the period since the Unix epoch, unaffected by time zones.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from kinetis_queue.schedules.declaration import Schedule

#: A due tick is on time while it is at most this many seconds old: a scheduler that wakes a little
#: late (a busy host, a slow store) still fires it. Older, it is missed, and the catch-up policy
#: decides whether it fires.
GRACE: Final = 60.0


def _cron_iter(schedule: Schedule, after: float, reverse: bool = False) -> Iterator[int]:
    from cronsim import CronSim

    assert schedule.cron is not None
    start = datetime.fromtimestamp(after, schedule.timezone)
    for moment in CronSim(schedule.cron, start, reverse=reverse):
        yield int(moment.timestamp())


def next_tick(schedule: Schedule, after: float) -> int:
    """The first tick strictly after ``after`` (Unix seconds)."""
    if schedule.every is not None:
        return (math.floor(after) // schedule.every + 1) * schedule.every
    for tick in _cron_iter(schedule, math.floor(after)):
        if tick > after:
            return tick
    raise AssertionError("a cron expression always has a next tick")  # pragma: no cover


def ticks_between(schedule: Schedule, after: float, until: float, limit: int) -> list[int]:
    """The ticks in (after, until], oldest first; when there are more than ``limit``, the most recent ``limit``."""
    if until <= after or limit <= 0:
        return []
    if schedule.every is not None:
        period = schedule.every
        last = math.floor(until) // period * period
        first = max(next_tick(schedule, after), last - (limit - 1) * period)
        return list(range(first, last + 1, period)) if first <= last else []
    # Walk back from ``until`` to find where the most recent ``limit`` ticks start, then walk forward
    # from there: the forward walk is the one that defines ticks (its DST rules are the documented ones).
    start = after
    for count, tick in enumerate(_cron_iter(schedule, math.floor(until) + 1, reverse=True), start=1):
        if tick <= after:
            break
        if count >= limit:
            start = max(after, tick - 1)
            break
    found: list[int] = []
    for tick in _cron_iter(schedule, math.floor(start)):
        if tick > until:
            break
        if tick > after:
            found.append(tick)
    return found[-limit:]


@dataclass(frozen=True)
class Due:
    """What a scheduler should push now: ``fire`` (oldest first), and how many missed ticks it skipped
    (counted up to 10,000: a lower bound beyond that, for the warning only)."""

    fire: list[int]
    skipped: int


def due(schedule: Schedule, cursor: float, now: float) -> Due:
    """The ticks in (cursor, now] to push under the schedule's catch-up policy, oldest first.

    Ticks at most GRACE seconds old are on time and all fire. Older ones are missed: ``skip`` fires
    none of them, ``latest`` the most recent one, ``all`` each of them, at most CATCH_UP_LIMIT (the
    most recent ones).
    """
    # Ticks are whole seconds: (ceil(now - GRACE) - 1, now] holds exactly those at most GRACE seconds old.
    window_start = max(cursor, math.ceil(now - GRACE) - 1)
    on_time = ticks_between(schedule, window_start, now, limit=_COUNT_CAP)
    if window_start <= cursor:
        return Due(on_time, 0)
    keep = {"skip": 0, "latest": 1, "all": schedule.catch_up_limit}[schedule.catch_up]
    missed = ticks_between(schedule, cursor, window_start, limit=keep) if keep else []
    skipped = _count_missed(schedule, cursor, window_start, cap=len(missed) + _COUNT_CAP) - len(missed)
    return Due(missed + on_time, max(0, skipped))


#: Counting skipped ticks is informative only (a log line): it stops here.
_COUNT_CAP: Final = 10_000


def _count_missed(schedule: Schedule, after: float, until: float, cap: int) -> int:
    """How many ticks fall in (after, until], counted up to ``cap``."""
    if schedule.every is not None:
        return min(cap, int(math.floor(until) // schedule.every - math.floor(after) // schedule.every))
    return len(ticks_between(schedule, after, until, limit=cap))
