"""System checks: KINETIS_QUEUE errors (kinetis_queue.E00x) and deployment warnings (W00x)."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import run_checks
from django.test import override_settings

from kinetis_queue import conf

ROOT = Path(__file__).resolve().parents[2]


#: The checks of kinetis_queue/conf/checks.py (the django.tasks backend has its own, E1xx).
OURS = re.compile(r"kinetis_queue\.[EW]0\d\d")


def ids(deploy: bool = False) -> list[str]:
    return sorted(m.id for m in run_checks(include_deployment_checks=deploy) if m.id and OURS.fullmatch(m.id))


def queue_setting(default: str = "a", **connections: Any) -> dict[str, Any]:
    return {"DEFAULT_CONNECTION": default, "CONNECTIONS": connections}


def test_the_test_settings_pass_every_check() -> None:
    # E002 is left out: the Django 5.2 venv installs no client library for Redis, SQS or RabbitMQ.
    assert [i for i in ids() if i.startswith("kinetis_queue.E") and i != "kinetis_queue.E002"] == []


def test_an_invalid_setting_is_e001_naming_the_key() -> None:
    with override_settings(KINETIS_QUEUE=queue_setting(a={"BACKEND": "sql", "VISIBILITY_TIMEOUT": 0})):
        [message] = [m for m in run_checks() if m.id == "kinetis_queue.E001"]
    assert "KINETIS_QUEUE['CONNECTIONS']['a']['VISIBILITY_TIMEOUT']" in message.msg


def test_an_unknown_database_alias_is_e001_with_the_known_aliases() -> None:
    with override_settings(KINETIS_QUEUE=queue_setting(a={"BACKEND": "sql", "DATABASE": "ledger"})):
        [message] = [m for m in run_checks() if m.id and OURS.fullmatch(m.id)]
    assert message.id == "kinetis_queue.E001"
    assert message.msg.endswith("['DATABASE'] must name an alias in DATABASES")
    assert message.hint is not None and message.hint.startswith("DATABASES has: default, postgres")


def test_a_missing_client_library_is_e002_naming_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    redis = conf.builtin_backends()["redis"]
    monkeypatch.setitem(conf.builtin_backends(), "redis", dataclasses.replace(redis, client="no_such_client_library"))
    with override_settings(KINETIS_QUEUE=queue_setting(a={"BACKEND": "redis", "URL": "redis://x"})):
        [message] = [m for m in run_checks() if m.id == "kinetis_queue.E002"]
    assert "pip install 'kinetis-queue[redis]'" in message.msg


@pytest.mark.parametrize("path", ["tests.no_such_module.Queue", "tests.jobs.Noop"])
def test_a_custom_backend_that_is_not_a_queue_is_e003(path: str) -> None:
    with override_settings(KINETIS_QUEUE=queue_setting(a={"BACKEND": "sql"}, b={"BACKEND": path})):
        assert ids() == ["kinetis_queue.E003"]


def test_deploy_warns_about_a_sync_default_connection() -> None:
    with override_settings(KINETIS_QUEUE=queue_setting(a={"BACKEND": "sync"})):
        assert "kinetis_queue.W001" in ids(deploy=True)
        assert "kinetis_queue.W001" not in ids()
    with override_settings(
        KINETIS_QUEUE=queue_setting(a={"BACKEND": "sql", "DATABASE": "postgres"}, b={"BACKEND": "sync"})
    ):
        assert "kinetis_queue.W001" not in ids(deploy=True)


@pytest.mark.parametrize(("timeout", "warned"), [(None, False), (60, False), (300, True), (900, True)])
def test_deploy_warns_when_the_timeout_is_not_below_the_visibility_timeout(timeout: int | None, warned: bool) -> None:
    connection = {"BACKEND": "sql", "DATABASE": "postgres", "VISIBILITY_TIMEOUT": 300, "TIMEOUT": timeout}
    with override_settings(KINETIS_QUEUE=queue_setting(a=connection)):
        assert ("kinetis_queue.W002" in ids(deploy=True)) is warned


def test_the_timeout_is_not_compared_on_a_backend_without_expiring_reservations() -> None:
    with override_settings(
        KINETIS_QUEUE={
            **queue_setting(a={"BACKEND": "sql", "DATABASE": "postgres"}, b={"BACKEND": "sync"}),
            "TIMEOUT": 900,
        }
    ):
        warnings = [m for m in run_checks(include_deployment_checks=True) if m.id == "kinetis_queue.W002"]
    assert [w.obj for w in warnings] == ["a"]


def test_deploy_warns_about_jobs_in_sqlite() -> None:
    with override_settings(KINETIS_QUEUE=queue_setting(a={"BACKEND": "sql", "DATABASE": "default"})):
        assert "kinetis_queue.W003" in ids(deploy=True)
    with override_settings(KINETIS_QUEUE=queue_setting(a={"BACKEND": "sql", "DATABASE": "mariadb"})):
        assert "kinetis_queue.W003" not in ids(deploy=True)


def test_manage_py_check_deploy_lists_the_warnings() -> None:
    env = {**os.environ, "KINETIS_TESTS_SUBPROCESS": "1", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "django", "check", "--deploy", "--settings=tests.settings"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "kinetis_queue.E" not in result.stderr
    assert "(kinetis_queue.W003) Connection 'sqlite' keeps its jobs in SQLite" in result.stderr
