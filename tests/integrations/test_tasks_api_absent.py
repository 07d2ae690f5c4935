"""An install without Django's tasks API (Django 5.2 without the django-tasks backport): the app starts,
its system checks pass, and the RunTask carrier is not registered (a RunTask message is then refused with
the ordinary "never imported" reason instead of crashing the start-up).

The child process hides ``django.tasks`` and ``django_tasks`` before Django starts (a ``None`` entry in
``sys.modules`` is what ``importlib.util.find_spec`` reports as absent), so the test runs on any Django.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN_TASK = "kinetis_queue.contrib.tasks.backend.RunTask"

CHILD = f"""
import json, sys
sys.modules["django.tasks"] = sys.modules["django_tasks"] = None  # this install has no tasks API
import django
django.setup()
from django.core.management import call_command
from kinetis_queue.payload import registry
from kinetis_queue.exceptions import JobReconstructionError
from kinetis_queue.job import Job
try:
    registry.resolve_job_class({RUN_TASK!r})
    refusal = None
except JobReconstructionError as exc:
    refusal = str(exc)
call_command("check", "--fail-level=WARNING")
print(json.dumps({{
    "registered": sorted(name for name in Job._registry if name.startswith("kinetis_queue.")),
    "backend_imported": "kinetis_queue.contrib.tasks.backend" in sys.modules,
    "refusal": refusal,
}}))
"""


def test_the_app_starts_without_the_tasks_api_and_registers_no_run_task() -> None:
    env = {**os.environ, "KINETIS_TESTS_SUBPROCESS": "1", "PYTHONPATH": str(ROOT)}
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    result = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert "System check identified no issues" in result.stdout
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["backend_imported"] is False
    assert RUN_TASK not in seen["registered"]
    assert "kinetis_queue.contrib.receivers.QueuedReceiverJob" in seen["registered"]
    assert seen["refusal"] == (
        f"job class {RUN_TASK!r} cannot be resolved: its module 'kinetis_queue.contrib.tasks.backend' was never "
        "imported in this process. A worker imports nothing a payload names: it knows the jobs and tasks modules "
        "of INSTALLED_APPS, the modules listed in KINETIS_QUEUE['IMPORTS'] (list it there) and what those and "
        "the project import at start-up"
    )
