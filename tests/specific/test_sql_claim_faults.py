"""The SQL claim on MariaDB (a SELECT ... FOR UPDATE SKIP LOCKED transaction) failing half-way.

Another session holds the jobs table with LOCK TABLES, so the claim's SELECT waits until the
connection's OPERATION_TIMEOUT read timeout ends it: the error reaches the caller, the half-done
transaction is abandoned, and the job is still there, unclaimed, for the next pop.
"""

from __future__ import annotations

import pytest
from django.db import DatabaseError
from django.db import connections as db_connections

from kinetis_queue.backends.sql import SqlQueue
from tests.jobs import Noop


def test_a_mariadb_claim_cut_off_mid_transaction_raises_and_loses_nothing(queue_name: str) -> None:
    queue = SqlQueue(database="mariadb", visibility_timeout=30, operation_timeout=1)
    job_id = queue.push(Noop(), queue=queue_name)
    locker = db_connections["mariadb"]
    with locker.cursor() as cursor:
        cursor.execute("LOCK TABLES kinetis_queue_jobs WRITE")
    try:
        with pytest.raises(DatabaseError):
            queue.pop(1, [queue_name])
    finally:
        with locker.cursor() as cursor:
            cursor.execute("UNLOCK TABLES")
    try:
        delivered = queue.pop(5, [queue_name])
        assert delivered is not None
        assert delivered.id == job_id
        assert delivered.attempts == 1  # the cut-off claim counted no attempt
        queue.ack(delivered)
        assert queue.size(queue_name) == 0
    finally:
        queue.clear(queue_name)
        queue.dispose()
