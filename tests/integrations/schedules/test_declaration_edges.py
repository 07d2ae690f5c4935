"""Schedule declarations the check refuses or accepts where test_checks.py does not go: entries that are no dict,
a time zone that is no string, a job class no worker imports, a constructor that raises, ARGS None, the
decorator's connection and a name it declares for two classes; the lazy Scheduler attribute."""

from __future__ import annotations

from typing import Any

import pytest

import kinetis_queue.schedules
from kinetis_queue import Job
from kinetis_queue.schedules import declaration, schedule
from kinetis_queue.schedules.checks import check_schedules
from kinetis_queue.schedules.scheduler import Scheduler
from tests import jobs
from tests.integrations.schedules.support import declared


class NotDiscovered(Job):
    """Module level, so runnable, but in a module no worker imports (not a jobs module, not in IMPORTS)."""

    def handle(self) -> None:
        pass


@pytest.fixture
def no_decorated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(declaration, "_declared", {})
    monkeypatch.setattr(declaration, "_redeclared", set())


def _messages(**entries: Any) -> list[str]:
    with declared(**entries):
        return [error.msg for error in check_schedules()]


def test_an_entry_that_is_not_a_dict_is_refused() -> None:
    assert _messages(report=["CRON", "0 3 * * *"]) == ["KINETIS_QUEUE['SCHEDULE']['report'] must be a dict"]


def test_a_schedule_setting_that_is_not_a_dict_is_refused() -> None:
    from django.conf import settings
    from django.test import override_settings

    with override_settings(KINETIS_QUEUE={**settings.KINETIS_QUEUE, "SCHEDULE": ["nightly"]}):
        messages = [error.msg for error in check_schedules()]
    assert messages == ["KINETIS_QUEUE['SCHEDULE'] must be a dict of name -> schedule"]


def test_a_time_zone_that_is_not_a_string_is_refused() -> None:
    (message,) = _messages(report={"EVERY": 60, "JOB": "tests.jobs.Noop", "TIMEZONE": 1})
    assert message == (
        "KINETIS_QUEUE['SCHEDULE']['report']['TIMEZONE'] must be an IANA time zone name, such as 'Europe/Paris'"
    )


def test_a_job_class_no_worker_imports_is_refused() -> None:
    (message,) = _messages(report={"EVERY": 60, "JOB": NotDiscovered})
    assert message.startswith(
        f"KINETIS_QUEUE['SCHEDULE']['report']['JOB'] names '{__name__}.NotDiscovered', whose module a worker "
        "does not import"
    )


def test_a_constructor_that_raises_is_named_by_its_exception_type_only() -> None:
    (message,) = _messages(report={"EVERY": 60, "JOB": "tests.jobs.Validates", "ARGS": {"amount": -4217}})
    assert message == (
        "KINETIS_QUEUE['SCHEDULE']['report']['ARGS'] do not build a tests.jobs.Validates: its constructor raised "
        "ValueError"
    )
    assert "4217" not in message


def test_args_none_means_no_arguments(no_decorated: None) -> None:
    with declared(report={"EVERY": 60, "JOB": "tests.jobs.Noop", "ARGS": None}):
        (found,) = declaration.load()
    assert found.args == {} and isinstance(found.build_job(), jobs.Noop)


def test_the_decorator_takes_a_connection(no_decorated: None) -> None:
    schedule("on-postgres", every=60, args={"label": "x"}, connection="postgres")(jobs.Records)
    with declared():
        (found,) = declaration.load()
    assert (found.name, found.connection) == ("on-postgres", "postgres")


def test_one_name_declared_by_the_decorator_for_two_classes_is_refused(no_decorated: None) -> None:
    schedule("twice", every=60, args={"label": "x"})(jobs.Records)
    schedule("twice", every=60)(jobs.Noop)
    assert _messages() == ["schedule 'twice' is declared twice (in KINETIS_QUEUE['SCHEDULE'] and/or by @schedule)"]


def test_the_scheduler_is_an_attribute_of_the_package_loaded_on_first_use() -> None:
    assert kinetis_queue.schedules.Scheduler is Scheduler
    with pytest.raises(AttributeError):
        kinetis_queue.schedules.NoSuchThing  # noqa: B018
