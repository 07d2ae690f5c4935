"""A task's result row written beside another SQLite writer (the CI failure of a worker whose registry
thread wrote while its task finished: "database is locked" failed the task for good).

SQLite fails a reader's transaction that must become a writer at once, with no busy wait, when another
connection took the write lock in between. The result-row update reads the row, then saves it: it must
hold the write lock from its BEGIN, so another writer waits for it instead of failing it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest
from django.db import connections

from kinetis_queue.contrib.tasks.backend import _fenced_update
from kinetis_queue.db.transactions import write_atomic
from kinetis_queue.models import TaskResultRecord
from tests import task_defs

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def other_writer() -> Iterator[sqlite3.Connection]:
    """A second connection to the test database's file that gives up at once when it cannot lock."""
    other = sqlite3.connect(connections["default"].settings_dict["NAME"], timeout=0, isolation_level=None)
    yield other
    if other.in_transaction:
        other.execute("ROLLBACK")
    other.close()


def _try_to_write(other: sqlite3.Connection) -> bool:
    """Whether ``other`` took the write lock (it then holds it until the test ends)."""
    try:
        other.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        assert "locked" in str(exc)
        return False
    return True


def test_a_result_update_holds_the_write_lock_between_its_read_and_its_write(
    queue_name: str, other_writer: sqlite3.Connection
) -> None:
    result = task_defs.add.using(queue_name=queue_name).enqueue(1, 2)
    job_id = "a" * 32
    TaskResultRecord.objects.filter(pk=result.id).update(attempt=1, status="RUNNING", job_id=job_id)
    interloper: list[bool] = []

    def succeed(record: TaskResultRecord) -> None:
        interloper.append(_try_to_write(other_writer))  # between the row's read and its save
        record.status = "SUCCESSFUL"

    record = _fenced_update(result.id, job_id, 1, succeed)
    assert interloper == [False]  # the other writer would have had to wait
    assert record is not None
    assert TaskResultRecord.objects.get(pk=result.id).status == "SUCCESSFUL"


def test_write_atomic_begins_immediate_only_for_its_own_block(other_writer: sqlite3.Connection) -> None:
    db = connections["default"]
    with write_atomic("default"):
        assert not _try_to_write(other_writer)
        with write_atomic("default"):  # nested: a savepoint of the same transaction
            assert db.in_atomic_block
    assert db.transaction_mode is None  # the setting's mode again (tests/settings.py names none)
    with db.cursor() as cursor:  # a plain atomic() of this connection still begins DEFERRED
        from django.db import transaction

        with transaction.atomic(using="default"):
            cursor.execute("SELECT 1")
            assert _try_to_write(other_writer)
            other_writer.execute("ROLLBACK")
