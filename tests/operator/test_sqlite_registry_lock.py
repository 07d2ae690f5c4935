"""The worker registry's write on SQLite waits for another writer's lock instead of failing "database is locked"
(the tutorial printed ``ERROR ... worker registry failed`` in about half its worker runs).

Its write reads the row, then writes it. In a transaction begun DEFERRED, SQLite refuses at once to turn a reader
into a writer while another connection holds the write lock (no busy timeout); begun IMMEDIATE, it waits for the
lock. Here another connection holds the write lock (``BEGIN IMMEDIATE``) and lets it go a moment later, while the
registry writes: the write must wait and succeed. A subprocess on an SQLite file migrated for the test
(tests/unmigrated_settings.py), with a busy timeout far longer than the moment.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.operator.test_tables import manage

pytestmark = pytest.mark.core

WRITE_UNDER_ANOTHER_WRITERS_LOCK = """
import sqlite3, threading
from django.db import connections
from kinetis_queue.observability.models import WorkerRecord
from kinetis_queue.observability.registry import WorkerRegistry

db = connections["default"]
db.settings_dict["OPTIONS"] = {"timeout": 120}  # the wait below is a moment; the bound holds under any load
other = sqlite3.connect(db.settings_dict["NAME"], isolation_level=None, check_same_thread=False)
other.execute("BEGIN IMMEDIATE")  # another writer (a worker's other thread, another worker) holds the lock
threading.Timer(0.3, other.execute, ["COMMIT"]).start()
registry = WorkerRegistry("sqlite", ["default"], 1)
registry._write()
print("written:", WorkerRecord.objects.filter(pk=registry.id).count())
"""


def test_the_registry_write_waits_for_another_writers_lock_on_sqlite(tmp_path: Path) -> None:
    database = tmp_path / "worker.sqlite3"
    migrated = manage(database, "migrate", "--verbosity=0")
    assert migrated.returncode == 0, migrated.stderr
    result = manage(database, "shell", "-c", WRITE_UNDER_ANOTHER_WRITERS_LOCK)
    assert "database is locked" not in result.stderr, result.stderr
    assert result.returncode == 0 and "written: 1" in result.stdout, result.stdout + result.stderr
