"""manage.py check validates every schedule (kinetis_queue.E006): each message names the schedule and the key."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from kinetis_queue.schedules import declaration, schedule
from kinetis_queue.schedules.checks import check_schedules
from tests.integrations.schedules.support import declared
from tests.jobs import Records

GOOD: dict[str, Any] = {"CRON": "0 3 * * *", "JOB": "tests.jobs.Records", "ARGS": {"label": "x"}}


def _messages(**entries: dict[str, Any]) -> list[str]:
    with declared(**entries):
        errors = check_schedules()
    assert all(error.id == "kinetis_queue.E006" for error in errors)
    return [error.msg for error in errors]


def test_valid_schedules_pass() -> None:
    assert (
        _messages(
            nightly={**GOOD, "TIMEZONE": "Europe/Paris", "CATCH_UP": "latest"},
            often={**GOOD, "CRON": None, "EVERY": 30},
        )
        == []
    )


@pytest.mark.parametrize(
    ("change", "key", "words"),
    [
        ({"CRON": "61 * * * *"}, "CRON", "is not a valid cron expression"),
        ({"CRON": 5}, "CRON", "must be a cron expression string"),
        ({"EVERY": 60}, "CRON", "or EVERY must be given, and not both"),
        ({"CRON": None}, "CRON", "or EVERY must be given, and not both"),
        ({"CRON": None, "EVERY": 0}, "EVERY", "must be an int number of seconds"),
        ({"CRON": None, "EVERY": 1.5}, "EVERY", "must be an int number of seconds"),
        ({"JOB": "tests.jobs.NoSuchJob"}, "JOB", "which this process does not know"),
        ({"JOB": "nowhere.Job"}, "JOB", "which this process does not know"),
        ({"JOB": 3}, "JOB", "must be the dotted path of a Job class"),
        ({"ARGS": {"colour": "red"}}, "ARGS", "do not fit tests.jobs.Records's constructor"),
        ({"ARGS": {}}, "ARGS", "do not fit tests.jobs.Records's constructor"),
        ({"ARGS": {"label": object()}}, "ARGS", "do not pass the argument contract"),
        ({"ARGS": ["x"]}, "ARGS", "must be a dict of keyword arguments"),
        ({"QUEUE": "no spaces"}, "QUEUE", "must be a queue name"),
        ({"CONNECTION": "nosuch"}, "CONNECTION", "must name one of KINETIS_QUEUE['CONNECTIONS']"),
        ({"TIMEZONE": "Mars/Olympus"}, "TIMEZONE", "names no known time zone"),
        ({"CATCH_UP": "some"}, "CATCH_UP", "must be one of 'skip', 'latest', 'all'"),
        ({"CATCH_UP_LIMIT": 0}, "CATCH_UP_LIMIT", "must be an int from 1"),
        ({"EVERYDAY": 1}, "EVERYDAY", "is not a schedule key"),
    ],
)
def test_each_bad_key_is_named(change: dict[str, Any], key: str, words: str) -> None:
    entry = {**GOOD, **change}
    entry = {k: v for k, v in entry.items() if not (k == "CRON" and v is None)}

    (message,) = _messages(report=entry)

    assert message.startswith(f"KINETIS_QUEUE['SCHEDULE']['report'][{key!r}] ")
    assert words in message


def test_an_argument_value_never_appears_in_the_message() -> None:
    class Secret:
        def __repr__(self) -> str:
            return "hunter2"

    (message,) = _messages(report={**GOOD, "ARGS": {"label": Secret()}})

    assert "hunter2" not in message and "label" in message


def test_a_job_class_no_worker_can_run_is_refused() -> None:
    """A class defined inside a function: a worker could never find it by its path."""
    from kinetis_queue import Job

    class Local(Job):
        def handle(self) -> None:
            pass

    (message,) = _messages(report={**GOOD, "JOB": Local, "ARGS": {}})

    assert message.startswith("KINETIS_QUEUE['SCHEDULE']['report']['JOB'] cannot be run by a worker")


def test_cron_without_the_library_is_a_clear_error_and_every_still_works(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(declaration, "cron_available", lambda: False)

    messages = _messages(cron=GOOD, every={**{k: v for k, v in GOOD.items() if k != "CRON"}, "EVERY": 60})

    assert messages == [
        "KINETIS_QUEUE['SCHEDULE']['cron']['CRON'] needs the cronsim library: "
        "pip install 'kinetis-queue[schedules]' (or use EVERY)"
    ]


def test_a_bad_schedule_name_and_a_non_dict_setting() -> None:
    assert _messages(**{"bad name!": GOOD}) == [
        "schedule name 'bad name!' is invalid: use 1 to 100 letters, digits, '_', '.', ':' or '-'"
    ]


def test_the_decorator_declares_a_schedule_checked_like_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(declaration, "_declared", {})
    monkeypatch.setattr(declaration, "_redeclared", set())

    schedule("decorated", every=3600, args={"label": "d"}, timezone="Europe/Paris")(Records)
    with declared():
        (found,) = declaration.load()
    assert (found.name, found.every, found.job_class, found.args) == ("decorated", 3600, Records, {"label": "d"})

    schedule("broken", cron="not cron", args={"label": "d"})(Records)
    with declared(decorated=GOOD):
        messages = sorted(check_schedules(), key=lambda e: e.msg)
    assert [m.msg for m in messages] == [
        "schedule 'broken' (@schedule) cron is not a valid cron expression (Wrong number of fields)",
        "schedule 'decorated' is declared twice (in KINETIS_QUEUE['SCHEDULE'] and/or by @schedule)",
    ]


def test_manage_py_check_reports_it() -> None:
    with declared(report={**GOOD, "CRON": "not cron"}), pytest.raises(SystemCheckError, match=r"kinetis_queue\.E006"):
        call_command("check")
