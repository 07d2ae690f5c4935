"""kinetis_queue.worker.hygiene writes Django's private connection attributes: pinned here on every supported Django.

This module is collected as core, so it runs on Django 6 and on Django 5.2 LTS (``-m core``), on each
SQL vendor. A Django release that renames or reinterprets one of those attributes fails it first.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections as db_connections
from django.db import transaction

from kinetis_queue import queues
from kinetis_queue.job import JobContext
from kinetis_queue.models import FailedJob
from kinetis_queue.worker import Worker
from kinetis_queue.worker.hygiene import abandon_transaction, reset_connections
from tests import jobs

ALIASES = ["default", "postgres", "mariadb"]

#: The private attributes abandon_transaction() writes, with their value outside any atomic() block.
OUTSIDE_ANY_BLOCK: dict[str, Any] = {
    "in_atomic_block": False,
    "savepoint_ids": [],
    "atomic_blocks": [],
    "needs_rollback": False,
    "closed_in_transaction": False,
    "commit_on_exit": True,
    "run_on_commit": [],
}


@pytest.fixture(autouse=True)
def _no_block_left_open() -> Iterator[None]:
    yield
    reset_connections()


def _private_state(db: Any) -> dict[str, Any]:
    return {name: getattr(db, name) for name in OUTSIDE_ANY_BLOCK}


def _write(alias: str) -> str:
    job_id = uuid.uuid4().hex
    FailedJob.objects.using(alias).create(
        queue="hygiene", job_id=job_id, job_class="tests.jobs.Noop", args="{}", attempts=1, exception_class="E"
    )
    return job_id


def _stored(alias: str, job_id: str) -> bool:
    return FailedJob.objects.using(alias).filter(job_id=job_id).exists()


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.logs_errors("kinetis_queue.worker")
def test_the_private_connection_attributes_hygiene_writes_exist_as_assumed(alias: str) -> None:
    db = db_connections[alias]
    db.ensure_connection()
    assert db.connection is not None
    assert db.settings_dict["AUTOCOMMIT"] is True
    assert _private_state(db) == OUTSIDE_ANY_BLOCK
    committed: list[str] = []
    # Two nested blocks with a pending on_commit callback, as a job that never exits them leaves them.
    transaction.atomic(using=alias).__enter__()
    transaction.atomic(using=alias).__enter__()
    transaction.on_commit(lambda: committed.append("abandoned"), using=alias)
    assert db.in_atomic_block is True
    assert len(db.atomic_blocks) == 2
    assert len(db.savepoint_ids) == 1
    assert len(db.run_on_commit) == 1
    assert db.get_autocommit() is False


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.logs_errors("kinetis_queue.worker")
def test_an_abandoned_transaction_is_rolled_back_and_the_connection_works_as_new(alias: str) -> None:
    db = db_connections[alias]
    committed: list[str] = []
    transaction.atomic(using=alias).__enter__()
    transaction.atomic(using=alias).__enter__()
    transaction.on_commit(lambda: committed.append("abandoned"), using=alias)
    abandoned = _write(alias)

    reset_connections()

    assert _private_state(db) == OUTSIDE_ANY_BLOCK
    assert committed == []
    assert not _stored(alias, abandoned)
    assert db.get_autocommit() is True
    with transaction.atomic(using=alias):
        kept = _write(alias)
        transaction.on_commit(lambda: committed.append("kept"), using=alias)
    assert committed == ["kept"]
    assert _stored(alias, kept)


@pytest.mark.parametrize("alias", ALIASES)
def test_a_transaction_abandoned_after_an_error_leaves_a_usable_connection(alias: str) -> None:
    """An error inside the block marks it for rollback (needs_rollback); the next job still gets a clean one."""
    db = db_connections[alias]
    transaction.atomic(using=alias).__enter__()
    abandoned = _write(alias)
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        raise RuntimeError("the job's inner block failed")
    transaction.set_rollback(True, using=alias)
    assert db.needs_rollback is True

    abandon_transaction(db)

    assert _private_state(db) == OUTSIDE_ANY_BLOCK
    assert not _stored(alias, abandoned)
    kept = _write(alias)
    assert _stored(alias, kept)


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_job_leaving_a_transaction_open_on_any_sql_database_does_not_stop_the_worker(
    alias: str, queue_name: str, outcomes: list
) -> None:
    """On MariaDB, closing the connection the rollback had already closed raised (MySQLdb error 2006)
    out of the worker's hygiene, and the worker stopped; the job is a success, the next one runs."""
    left_open: list[str] = []

    def leaves_a_transaction_open(context: JobContext) -> None:
        transaction.atomic(using=alias).__enter__()
        left_open.append(_write(alias))

    jobs.CALLBACK[:] = [leaves_a_transaction_open]
    queue = queues["sqlite"]
    queue.push(jobs.CallsBack(), queue=queue_name)
    queue.push(jobs.CallsBack(), queue=queue_name)
    worker = Worker(queue)
    try:
        assert worker.process_next(5, [queue_name]) is True
        assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()
    assert [name for name, _ in outcomes] == ["job_succeeded", "job_succeeded"]
    assert len(left_open) == 2
    assert not any(_stored(alias, job_id) for job_id in left_open)
    assert db_connections[alias].in_atomic_block is False
