"""The Scheduler when its claim store fails (the claims table gone: a real database error) and when a DatabaseClaims
claim is taken over while its scheduler is still pushing: each is logged and tried again, never raised."""

from __future__ import annotations

import logging
import math
import time

import pytest
from django.db import connections as db_connections

from kinetis_queue import JobContext
from kinetis_queue.schedules.scheduler import RETRY_PAUSE, Scheduler
from kinetis_queue.schedules.stores import DatabaseClaims, tick_job_id
from tests import jobs
from tests.integrations.schedules.support import build

HOUR = 3600


def _hour() -> int:
    return math.floor(time.time() / HOUR) * HOUR


def test_a_claim_store_that_fails_is_logged_everywhere_and_the_schedule_fires_once_it_is_back(
    queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The sync connection's claims are rows of the Django database (DatabaseClaims): with their table gone,
    reading the last tick, completing outstanding claims, pruning and the status all fail and are logged."""
    schedule = build(EVERY=HOUR, CONNECTION="sync", QUEUE=queue_name, ARGS={"label": "hourly"})
    scheduler = Scheduler([schedule])
    assert isinstance(scheduler.store(schedule), DatabaseClaims)
    t0 = _hour()
    with db_connections["default"].cursor() as cursor:
        cursor.execute("ALTER TABLE kinetis_queue_schedule_ticks RENAME TO kinetis_queue_schedule_ticks_away")
    try:
        with caplog.at_level(logging.WARNING, logger="kinetis_queue.schedules"):
            assert scheduler.fire_due(t0 + 1) == RETRY_PAUSE
        (status,) = scheduler.status(t0 + 1)
    finally:
        with db_connections["default"].cursor() as cursor:
            cursor.execute("ALTER TABLE kinetis_queue_schedule_ticks_away RENAME TO kinetis_queue_schedule_ticks")

    text = caplog.text
    assert f"Schedule {schedule.name!r}: could not push its due tick(s), trying again: OperationalError" in text
    assert "Could not complete outstanding schedule claims: OperationalError" in text
    assert f"Schedule {schedule.name!r}: could not prune old claims: OperationalError" in text
    assert status.error is not None and status.error.startswith("OperationalError: no such table")
    assert (status.last_run, status.last_job_id) == (None, None)

    scheduler.fire_due(t0 + 2)  # back: starts from now
    scheduler.fire_due(t0 + HOUR + 1)
    assert [call[1] for call in jobs.CALLS if call[0] == "Records"] == ["hourly"]  # the sync push ran it
    assert [job_id for _, _, job_id in scheduler.pushed] == [tick_job_id(schedule.name, t0 + HOUR)]


def test_a_claim_taken_over_while_its_scheduler_pushes_is_pushed_twice_under_one_job_id(
    queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The documented duplicate window, reached for real: the first scheduler's push (the sync backend runs the
    job inside it) lasts past the claim timeout, so a second scheduler completes the claim and pushes the tick;
    the first then finds its claim taken and says the job may run twice."""
    schedule = build(EVERY=HOUR, CONNECTION="sync", QUEUE=queue_name, JOB="tests.jobs.CallsBack", ARGS={})
    first = Scheduler([schedule], claim_timeout=30)
    second = Scheduler([schedule], claim_timeout=30)
    tick = _hour() + HOUR
    first.fire_due(tick - HOUR + 1)

    def meanwhile(context: JobContext) -> None:
        jobs.CALLBACK[:] = [lambda context: None]
        second.fire_due(tick + 100)  # the claim is 99 s old: taken over, pushed again

    jobs.CALLBACK[:] = [meanwhile]
    with caplog.at_level(logging.WARNING, logger="kinetis_queue.schedules"):
        first.fire_due(tick + 1)

    job_id = tick_job_id(schedule.name, tick)
    assert first.pushed == [(schedule.name, tick, job_id)]
    assert [call for call in jobs.CALLS if call[0] == "CallsBack"] == [("CallsBack", 1), ("CallsBack", 1)]
    assert f"Scheduled job {job_id} was pushed after its claim had been taken over: it may run twice" in caplog.text
    assert "the claim of tick" in caplog.text  # the second scheduler's takeover
