"""Discovery (kinetis_queue/payload/registry.py): the jobs and tasks modules of INSTALLED_APPS and
KINETIS_QUEUE["IMPORTS"].

A discovery module that fails to import is reported with its real error by ``manage.py check``
(kinetis_queue.E004) and stops ``queue_work``; it never crashes Django's start-up. Job classes of
discovery modules that no worker can run are kinetis_queue.E005.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.checks import run_checks
from django.test import override_settings

from kinetis_queue import conf, queues
from kinetis_queue.exceptions import QueueConfigurationError
from kinetis_queue.models import FailedJob
from kinetis_queue.payload import registry
from tests import jobs
from tests.settings import KINETIS_QUEUE

ROOT = Path(__file__).resolve().parents[2]
#: What the ImportError raised inside tests/broken_app/jobs.py says (the file's path follows).
BROKEN = (
    "module 'tests.broken_app.jobs' failed to import: ImportError: cannot import name 'NoSuchName' from 'tests.jobs'"
)


def manage(settings: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "KINETIS_TESTS_SUBPROCESS": "1", "PYTHONPATH": str(ROOT), **env}
    return subprocess.run(
        [sys.executable, "-m", "django", *args, f"--settings={settings}"],
        env=environment,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
    )


def with_imports(*modules: str) -> Any:
    return override_settings(KINETIS_QUEUE={**KINETIS_QUEUE, "IMPORTS": [*KINETIS_QUEUE["IMPORTS"], *modules]})


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ("tests.operator_jobs", "KINETIS_QUEUE['IMPORTS'] must be a list"),
        (["tests.operator_jobs", 3], "KINETIS_QUEUE['IMPORTS'][1] must be a dotted module name"),
        (["tests/operator_jobs.py"], "KINETIS_QUEUE['IMPORTS'][0] must be a dotted module name"),
        ([""], "KINETIS_QUEUE['IMPORTS'][0] must be a dotted module name"),
    ],
)
def test_imports_is_validated_naming_the_key(value: Any, key: str) -> None:
    with override_settings(KINETIS_QUEUE={**KINETIS_QUEUE, "IMPORTS": value}):
        with pytest.raises(QueueConfigurationError) as raised:
            conf.load()
        assert str(raised.value).startswith(key)
        assert [m.id for m in run_checks() if m.id == "kinetis_queue.E001"] == ["kinetis_queue.E001"]


def test_the_test_settings_discover_the_apps_jobs_module_and_the_imports() -> None:
    assert registry.discover() == []
    assert registry.discovered() >= {"tests.jobs", "tests.operator_jobs", "tests.operator_receivers"}
    assert "kinetis_queue.tasks" not in registry.discovery_modules()  # the package's own app is not discovered


def test_a_failing_discovery_module_is_e004_with_its_real_error() -> None:
    with with_imports("tests.broken_app.jobs", "tests.no_such_module"):
        messages = [m for m in run_checks() if m.id == "kinetis_queue.E004"]
    assert [m.obj for m in messages] == ["tests.broken_app.jobs", "tests.no_such_module"]
    assert messages[0].msg.startswith(BROKEN)
    assert messages[1].msg == (
        "module 'tests.no_such_module' failed to import: ModuleNotFoundError: No module named 'tests.no_such_module'"
    )


def test_a_job_class_of_a_discovery_module_that_cannot_run_is_e005() -> None:
    with with_imports("tests.unrunnable_jobs"):
        messages = [m for m in run_checks() if m.id == "kinetis_queue.E005"]
    assert sorted(m.obj for m in messages) == ["tests.unrunnable_jobs.CountingHandle", "tests.unrunnable_jobs.NoHandle"]
    shown = {m.obj: m.msg for m in messages}
    assert "defines no handle()" in shown["tests.unrunnable_jobs.NoHandle"]
    assert "handle() parameter 'count' cannot be resolved" in shown["tests.unrunnable_jobs.CountingHandle"]


def test_a_job_class_whose_unique_attributes_a_push_would_refuse_is_e007() -> None:
    with with_imports("tests.unrunnable_jobs"):
        messages = {m.obj: m.msg for m in run_checks() if m.id == "kinetis_queue.E007"}
    assert sorted(messages) == [
        "tests.unrunnable_jobs.DebounceWhileRunning",
        "tests.unrunnable_jobs.ScopeWithoutLifetime",
        "tests.unrunnable_jobs.UniqueForever",
    ]
    assert (
        "unique_for must be a number of seconds above 0, at most 2592000"
        in messages["tests.unrunnable_jobs.UniqueForever"]
    )
    assert "unique_debounce needs unique_until='started'" in messages["tests.unrunnable_jobs.DebounceWhileRunning"]
    assert "without unique_for" in messages["tests.unrunnable_jobs.ScopeWithoutLifetime"]


def test_a_job_class_whose_arguments_no_push_can_store_is_e010() -> None:
    """Issue 27 item 11: a generic models.Model annotation is reported before the first push refuses it."""
    with with_imports("tests.unrunnable_jobs"):
        messages = {m.obj: m.msg for m in run_checks() if m.id == "kinetis_queue.E010"}
    assert sorted(messages) == ["tests.unrunnable_jobs.AnyModelArgument", "tests.unrunnable_jobs.StarArguments"]
    assert messages["tests.unrunnable_jobs.AnyModelArgument"].startswith(
        "tests.unrunnable_jobs.AnyModelArgument: __init__ parameter instance is annotated with the generic "
        "models.Model, which would let a stored payload load a row of any installed model"
    )
    assert messages["tests.unrunnable_jobs.StarArguments"] == (
        "tests.unrunnable_jobs.StarArguments: __init__ takes *items, which cannot be stored"
    )


def test_manage_py_check_reports_a_broken_apps_jobs_module_instead_of_crashing() -> None:
    result = manage("tests.broken_settings", "check")
    assert result.returncode == 1
    assert f"tests.broken_app.jobs: (kinetis_queue.E004) {BROKEN}" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("skip_checks", [False, True], ids=["with-checks", "skip-checks"])
def test_queue_work_refuses_to_start_while_a_discovery_module_fails(skip_checks: bool, queue_name: str) -> None:
    queues["sqlite"].push(jobs.Records("waits"), queue=queue_name)
    extra = ["--skip-checks"] if skip_checks else []
    result = manage(
        "tests.broken_settings",
        "queue_work",
        "--connection=sqlite",
        f"--queue={queue_name}",
        "--once",
        "--sleep=0.1",
        *extra,
    )
    assert result.returncode == 1
    assert BROKEN in result.stderr
    assert "Worker on connection" not in result.stdout
    assert queues["sqlite"].size(queue_name) == 1  # no job was taken


def test_a_module_listed_in_imports_is_imported_at_start_up_and_resolves(tmp_path: Path, queue_name: str) -> None:
    """The control of tests/conformance/test_resolution.py: the same payload runs once its module is listed."""
    import json

    from django.db import connections as db_connections

    marker = tmp_path / "effects"
    queue = queues["sqlite"]
    unlisted = queue.push(jobs.Noop(), queue=queue_name, max_attempts=1)
    with db_connections["default"].cursor() as cursor:
        cursor.execute(
            "UPDATE kinetis_queue_jobs SET job_class = %s, args = %s WHERE job_id = %s",
            ["tests.import_effects.Effect", json.dumps({}), unlisted],
        )
    work = ("queue_work", "--connection=sqlite", f"--queue={queue_name}", "--once", "--sleep=5")
    result = manage("tests.settings", *work, KINETIS_TESTS_IMPORT_MARKER=str(marker))
    assert result.returncode == 0, result.stderr
    assert not marker.exists()  # that worker never imported the module the payload named
    assert "was never imported in this process" in FailedJob.objects.get(job_id=unlisted).exception_message

    listed = queue.push(jobs.Noop(), queue=queue_name)
    with db_connections["default"].cursor() as cursor:
        cursor.execute(
            "UPDATE kinetis_queue_jobs SET job_class = %s WHERE job_id = %s", ["tests.import_effects.Effect", listed]
        )
    result = manage("tests.imports_settings", *work, KINETIS_TESTS_IMPORT_MARKER=str(marker))
    assert result.returncode == 0, result.stderr
    assert marker.read_text() == "imported ran"
    assert not FailedJob.objects.filter(job_id=listed).exists()
    assert queue.size(queue_name) == 0
