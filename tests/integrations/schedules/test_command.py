"""``queue_schedule``: --list (name, next run, last run, last job id), --once, and its refusals."""

from __future__ import annotations

import json
import math
import time
from datetime import datetime
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from kinetis_queue import queues
from kinetis_queue.schedules.scheduler import Scheduler
from kinetis_queue.schedules.stores import tick_job_id
from tests.integrations.schedules.support import build, declared, unique


def _entry(queue: str, **extra: object) -> dict[str, object]:
    return {"EVERY": 3600, "JOB": "tests.jobs.Records", "ARGS": {"label": "x"}, "QUEUE": queue, **extra}


def test_list_shows_next_run_last_run_and_last_job_id(queue_name: str) -> None:
    name = unique()
    hour = math.floor(time.time() / 3600) * 3600
    schedule = build(name, **_entry(queue_name, CONNECTION="postgres", TIMEZONE="Europe/Paris"))
    scheduler = Scheduler([schedule])
    scheduler.fire_due(hour - 3600 + 1)
    scheduler.fire_due(hour + 1)  # fires `hour`
    out = StringIO()

    with declared(**{name: _entry(queue_name, CONNECTION="postgres", TIMEZONE="Europe/Paris")}):
        call_command("queue_schedule", "--list", "--json", stdout=out)

    (line,) = json.loads(out.getvalue())["schedules"]
    assert line["name"] == name and line["when"] == "every 3600s" and line["job"] == "tests.jobs.Records"
    assert line["last_job_id"] == tick_job_id(name, hour)
    assert datetime.fromisoformat(line["last_run"]).timestamp() == hour
    assert datetime.fromisoformat(line["next_run"]).timestamp() > time.time()
    assert line["last_run"].endswith(("+01:00", "+02:00"))  # shown in the schedule's time zone
    queues["postgres"].clear(queue_name)  # type: ignore[attr-defined]

    table = StringIO()
    with declared(**{name: _entry(queue_name, CONNECTION="postgres")}):
        call_command("queue_schedule", "--list", stdout=table)
    header, row = table.getvalue().splitlines()
    assert header.split()[:3] == ["NAME", "WHEN", "JOB"]
    assert row.startswith(name) and row.endswith(tick_job_id(name, hour))


def test_list_of_a_schedule_never_fired(queue_name: str) -> None:
    name = unique()
    out = StringIO()
    with declared(**{name: _entry(queue_name, CONNECTION="redis")}):
        call_command("queue_schedule", "--list", "--json", stdout=out)
    (line,) = json.loads(out.getvalue())["schedules"]
    assert (line["last_run"], line["last_job_id"]) == (None, None)


def test_once_fires_what_is_due_and_exits(queue_name: str) -> None:
    """A first run starts at the present: nothing before it fires, so --once on a fresh schedule pushes nothing."""
    name = unique()
    out = StringIO()
    with declared(**{name: _entry(queue_name, CONNECTION="sqlite")}):
        call_command("queue_schedule", "--once", stdout=out)
    assert "pushed 0 job(s)" in out.getvalue()


def test_refusals() -> None:
    with declared(), pytest.raises(CommandError, match="no schedule is declared"):
        call_command("queue_schedule", "--once")
    with declared(bad={"CRON": "nope", "JOB": "tests.jobs.Records"}), pytest.raises(CommandError, match="'CRON'"):
        call_command("queue_schedule", "--list")
