"""A project that uses kinetis_queue without 'kinetis_queue' in INSTALLED_APPS: the stores that live in the Django
database (unique locks and concurrency slots of the backends without their own) say what is missing instead of
failing obscurely. A child process with those settings, since an app cannot leave a running registry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import json
import django
from django.conf import settings
import tests.settings as base
names = {name: getattr(base, name) for name in dir(base) if name.isupper()}
names["INSTALLED_APPS"] = [app for app in base.INSTALLED_APPS if app != "kinetis_queue"]
settings.configure(**names)
django.setup()
from kinetis_queue.limits import slot_store_of
from kinetis_queue import connections
from kinetis_queue.exceptions import InvalidQueueArgumentError
from tests import jobs
refusals = []
attempts = (lambda: connections.build("sync").push(jobs.Unique("x")), lambda: slot_store_of(connections.build("sqs")))
for attempt in attempts:
    try:
        attempt()
        refusals.append(None)
    except InvalidQueueArgumentError as exc:
        refusals.append(str(exc))
print(json.dumps({"refusals": refusals, "ran": jobs.CALLS}))
"""


def test_unique_jobs_and_limits_without_the_app_say_to_install_it() -> None:
    env = {**os.environ, "KINETIS_TESTS_SUBPROCESS": "1", "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    result = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert report == {
        "refusals": [
            "unique jobs on the sync backend keep their locks in the Django database: "
            "add 'kinetis_queue' to INSTALLED_APPS",
            "concurrency limits on the sqs backend keep their slots in the Django database: "
            "add 'kinetis_queue' to INSTALLED_APPS",
        ],
        "ran": [],
    }
