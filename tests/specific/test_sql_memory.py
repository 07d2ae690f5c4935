"""The SQL backend on an in-memory SQLite database, as Django's test runner gives a project by default.

A second connection to ``:memory:`` would open a different, empty database, so the worker's side
uses Django's own connection there. Run in a subprocess on tests/memory_settings.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import django
django.setup()
from django.core.management import call_command
from kinetis_queue import connections
from tests.jobs import Noop
call_command("migrate", verbosity=0)
queue = connections.build("sqlite")
job_id = queue.push(Noop(), queue="memory")
delivered = queue.pop(0, ["memory"])
assert delivered is not None, "the worker's side found nothing"
print(delivered.id == job_id, queue.size("memory"))
"""


def test_a_worker_on_an_in_memory_sqlite_database_sees_the_jobs_pushed_there() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "tests.memory_settings"}
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["True", "0"]  # the pushed job, now reserved: nothing left waiting
