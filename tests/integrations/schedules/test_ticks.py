"""Tick computation: cron in a time zone across DST changes, EVERY, and the catch-up policies (issue 15 §1)."""

from __future__ import annotations

import itertools

import pytest

from kinetis_queue.schedules import ticks
from tests.integrations.schedules.support import at, build, local

PARIS = "Europe/Paris"
NEW_YORK = "America/New_York"


def _between(schedule: object, start: str, end: str, zone: str, limit: int = 1000) -> list[str]:
    found = ticks.ticks_between(schedule, at(start, zone), at(end, zone), limit)  # type: ignore[arg-type]
    return [local(tick, zone) for tick in found]


@pytest.mark.parametrize(
    ("zone", "day", "offsets"),
    [
        (PARIS, "2026-03-29", ("+0100", "+0200")),
        (NEW_YORK, "2026-03-08", ("-0500", "-0400")),
    ],
)
def test_a_time_skipped_by_spring_forward_fires_once_at_the_next_valid_minute(
    zone: str, day: str, offsets: tuple[str, str]
) -> None:
    """02:30 does not exist that night: the daily 02:30 tick fires once, at 03:00, and at 02:30 the days around."""
    schedule = build(CRON="30 2 * * *", TIMEZONE=zone)
    before, after = offsets
    year, month, date = day.split("-")
    prev = f"{year}-{month}-{int(date) - 1:02d}"
    nxt = f"{year}-{month}-{int(date) + 1:02d}"

    found = _between(schedule, f"{prev} 00:00", f"{nxt} 23:00", zone)

    assert found == [f"{prev} 02:30{before}", f"{day} 03:00{after}", f"{nxt} 02:30{after}"]


@pytest.mark.parametrize(("zone", "day"), [(PARIS, "2026-10-25"), (NEW_YORK, "2026-11-01")])
def test_a_time_repeated_by_fall_back_fires_once(zone: str, day: str) -> None:
    """The repeated hour: a fixed-hour tick inside it fires once, at its first occurrence."""
    hour = "2" if zone == PARIS else "1"
    schedule = build(CRON=f"30 {hour} * * *", TIMEZONE=zone)

    found = ticks.ticks_between(schedule, at(f"{day} 00:00", zone), at(f"{day} 12:00", zone), 1000)

    assert len(found) == 1
    summer = "+0200" if zone == PARIS else "-0400"
    assert local(found[0], zone) == f"{day} 0{hour}:30{summer}"


def test_a_stepped_schedule_fires_through_both_passes_of_the_repeated_hour() -> None:
    """``*/30`` means every 30 minutes of real time: 4 ticks in the repeated hour's two passes, none twice."""
    schedule = build(CRON="*/30 * * * *", TIMEZONE=PARIS)

    found = ticks.ticks_between(schedule, at("2026-10-25 01:45", PARIS), at("2026-10-25 03:15", PARIS), 1000)

    assert [local(t, PARIS) for t in found] == [
        "2026-10-25 02:00+0200",
        "2026-10-25 02:30+0200",
        "2026-10-25 02:00+0100",
        "2026-10-25 02:30+0100",
        "2026-10-25 03:00+0100",
    ]
    assert all(b - a == 1800 for a, b in itertools.pairwise(found))


def test_ticks_are_instants_the_same_for_any_limit() -> None:
    """The most recent N ticks are the tail of the full list, across a DST change (the reverse walk agrees)."""
    schedule = build(CRON="15 */2 * * *", TIMEZONE=NEW_YORK)
    start, end = at("2026-10-31 00:00", NEW_YORK), at("2026-11-02 00:00", NEW_YORK)

    full = ticks.ticks_between(schedule, start, end, 1000)

    for limit in (1, 3, 7, len(full)):
        assert ticks.ticks_between(schedule, start, end, limit) == full[-limit:]


def test_every_ticks_are_aligned_on_the_epoch() -> None:
    schedule = build(EVERY=10)

    assert ticks.next_tick(schedule, 100) == 110
    assert ticks.next_tick(schedule, 100.5) == 110
    assert ticks.ticks_between(schedule, 100, 155, 1000) == [110, 120, 130, 140, 150]
    assert ticks.ticks_between(schedule, 100, 155, 2) == [140, 150]


def test_cron_next_tick_is_strictly_after() -> None:
    schedule = build(CRON="* * * * *")

    assert ticks.next_tick(schedule, 120) == 180
    assert ticks.next_tick(schedule, 119.5) == 120


def test_catch_up_skip_fires_only_ticks_within_the_grace() -> None:
    """Down 1000 s with EVERY=10: skip fires the ticks of the last GRACE seconds only, and counts the rest."""
    schedule = build(EVERY=10, CATCH_UP="skip")

    due = ticks.due(schedule, cursor=1000, now=2000)

    assert due.fire == list(range(1940, 2001, 10))
    assert due.skipped == 93


def test_catch_up_latest_fires_the_most_recent_missed_tick_once() -> None:
    schedule = build(EVERY=10, CATCH_UP="latest")

    due = ticks.due(schedule, cursor=1000, now=2000)

    assert due.fire == [1930, *range(1940, 2001, 10)]
    assert due.skipped == 92


def test_catch_up_all_fires_each_missed_tick_bounded_by_the_limit() -> None:
    bounded = build(EVERY=10, CATCH_UP="all", CATCH_UP_LIMIT=5)
    unbounded = build(EVERY=10, CATCH_UP="all")

    assert ticks.due(bounded, cursor=1000, now=2000).fire == [*range(1890, 1931, 10), *range(1940, 2001, 10)]
    assert ticks.due(bounded, cursor=1000, now=2000).skipped == 88
    assert ticks.due(unbounded, cursor=1000, now=2000).fire == list(range(1010, 2001, 10))


def test_catch_up_of_a_daily_cron_after_three_days_down() -> None:
    """A daily 03:00 Paris schedule last fired three days ago, back at noon: latest fires today's 03:00 only."""
    latest = build(CRON="0 3 * * *", TIMEZONE=PARIS, CATCH_UP="latest")
    skip = build(CRON="0 3 * * *", TIMEZONE=PARIS, CATCH_UP="skip")
    every = build(CRON="0 3 * * *", TIMEZONE=PARIS, CATCH_UP="all")
    cursor, now = at("2026-03-27 03:00", PARIS), at("2026-03-30 12:00", PARIS)

    assert [local(t, PARIS) for t in ticks.due(latest, cursor, now).fire] == ["2026-03-30 03:00+0200"]
    assert ticks.due(skip, cursor, now).fire == []
    assert ticks.due(skip, cursor, now).skipped == 3
    assert [local(t, PARIS) for t in ticks.due(every, cursor, now).fire] == [
        "2026-03-28 03:00+0100",
        "2026-03-29 03:00+0200",
        "2026-03-30 03:00+0200",
    ]


def test_nothing_is_due_between_ticks() -> None:
    schedule = build(EVERY=60, CATCH_UP="all")

    assert ticks.due(schedule, cursor=120, now=179.9).fire == []
    assert ticks.due(schedule, cursor=120, now=180).fire == [180]


def test_the_skipped_count_of_a_long_catch_up_is_not_swallowed_by_the_limit() -> None:
    """Regression: with CATCH_UP_LIMIT at its 10,000 maximum the count of the ticks left out came out 0."""
    schedule = build(EVERY=1, CATCH_UP="all", CATCH_UP_LIMIT=10_000)

    due = ticks.due(schedule, cursor=0, now=100_000)

    assert len(due.fire) == 10_000 + 61
    assert due.skipped == 10_000  # of the 89,939 left out: counted up to 10,000 (a lower bound, for the warning)
