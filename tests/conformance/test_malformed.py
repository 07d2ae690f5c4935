"""Conformance: corrupted stored jobs (contract: "Malformed stored messages").

A stored job is corrupted after push() wrote it, the way a hand edit or another writer would, and
the next pop() must remove it and raise MalformedJobSettledError rather than anything that would
stop a worker. Only the SQL backends' rows can be corrupted from here (through the Django database
alias); the other durable backends need their own corruption hook and skip.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connections as db_connections

from kinetis_queue.contracts import Queue
from kinetis_queue.exceptions import JobReconstructionError, MalformedJobSettledError
from kinetis_queue.payload.serializer import deserialize_job
from tests.jobs import Noop, Records
from tests.support.backends import Backend

pytestmark = pytest.mark.trait("stores_jobs")

TABLE = "kinetis_queue_jobs"


class StoredRow:
    """The row a push() wrote, reached through the SQL backend's Django database alias."""

    def __init__(self, database: str, queue: str) -> None:
        self.database = database
        with db_connections[database].cursor() as cursor:
            cursor.execute(f"SELECT id FROM {TABLE} WHERE queue = %s", [queue])
            (self.pk,) = cursor.fetchone()

    def corrupt(self, column: str, value: str | int | float) -> None:
        with db_connections[self.database].cursor() as cursor:
            cursor.execute(f"UPDATE {TABLE} SET {column} = %s WHERE id = %s", [value, self.pk])
            assert cursor.rowcount == 1

    def exists(self) -> bool:
        with db_connections[self.database].cursor() as cursor:
            cursor.execute(f"SELECT COUNT(*) FROM {TABLE} WHERE id = %s", [self.pk])
            return bool(cursor.fetchone()[0])

    def matched_by(self, queue: str) -> bool:
        """Whether this database's own comparison finds the row under ``queue``."""
        with db_connections[self.database].cursor() as cursor:
            cursor.execute(f"SELECT COUNT(*) FROM {TABLE} WHERE id = %s AND queue = %s", [self.pk, queue])
            return bool(cursor.fetchone()[0])


@pytest.fixture
def database(backend: Backend) -> Iterator[str]:
    if backend.database is None:
        pytest.skip(f"{backend.id}: no SQL row to corrupt from a test")
    yield backend.database


def _deep(depth: int) -> str:
    return '{"items":' + "[" * depth + "]" * depth + "}"


MALFORMED = [
    pytest.param("args", "not json", id="args-invalid-json"),
    pytest.param("args", "", id="args-empty"),
    pytest.param("args", '{"label": "x"', id="args-truncated"),
    pytest.param("args", '["label"]', id="args-array"),
    pytest.param("args", '"label"', id="args-string"),
    pytest.param("args", "null", id="args-null"),
    pytest.param("args", '{"label": NaN}', id="args-nan"),
    pytest.param("args", '{"label": Infinity}', id="args-infinity"),
    pytest.param("args", '{"label": -Infinity}', id="args-minus-infinity"),
    pytest.param("args", '{"label": 1e999}', id="args-float-overflow"),
    pytest.param("args", '{"label": "a", "label": "b"}', id="args-duplicate-key"),
    pytest.param("args", '{"label": "\\ud800"}', id="args-lone-surrogate"),
    pytest.param("args", "[" * 10000, id="args-10000-open-brackets"),
    pytest.param("args", _deep(10000), id="args-nested-10000-deep"),
    pytest.param("args", _deep(40), id="args-nested-40-deep"),
    pytest.param("metadata", "not json", id="metadata-invalid-json"),
    pytest.param("metadata", "[]", id="metadata-array"),
    pytest.param("metadata", '{"k": 1, "k": 2}', id="metadata-duplicate-key"),
    pytest.param("job_id", "not-an-id", id="job-id-not-hex"),
    pytest.param("job_id", "A" * 32, id="job-id-uppercase"),
    pytest.param("job_id", "0" * 31, id="job-id-31-chars"),
    pytest.param("job_id", "0" * 31 + "g", id="job-id-non-hex-char"),
    pytest.param("job_id", "", id="job-id-empty"),
    pytest.param("job_class", "", id="job-class-empty"),
    # push() stores module.QualName of a real class: dotted identifiers, nothing else (issue 12, item 5).
    pytest.param("job_class", "tests.jobs.Records\x1b[2J", id="job-class-escape-sequence"),
    pytest.param("job_class", "tests.jobs.Records\nforged", id="job-class-newline"),
    pytest.param("job_class", "tests.jobs.Records ", id="job-class-trailing-space"),
    pytest.param("job_class", "Records", id="job-class-no-module"),
    pytest.param("job_class", "tests..Records", id="job-class-empty-part"),
    pytest.param("args", '{"la bel": "x"}', id="args-key-not-an-identifier"),
    pytest.param("attempts", -1, id="attempts-negative"),
    pytest.param("max_attempts", -1, id="max-attempts-negative"),
    pytest.param("pushed_at", -1.0, id="pushed-at-negative"),
]


@pytest.mark.parametrize(("column", "value"), MALFORMED)
def test_malformed_row_is_removed_and_reported(
    connection: Queue, database: str, queue_name: str, column: str, value: str | int | float
) -> None:
    """Contract: Malformed stored messages (pop() removes it with the fenced DELETE and raises
    MalformedJobSettledError)."""
    connection.push(Records("corrupted"), queue=queue_name)
    row = StoredRow(database, queue_name)
    healthy = connection.push(Records("healthy"), queue=queue_name)
    row.corrupt(column, value)

    with pytest.raises(MalformedJobSettledError):
        connection.pop(5, [queue_name])

    assert not row.exists()
    # The queue keeps flowing: the job behind the corrupted one is delivered next.
    delivered = connection.pop(5, [queue_name])
    assert delivered is not None
    assert (delivered.id, delivered.attempts) == (healthy, 1)
    connection.ack(delivered)
    assert connection.size(queue_name) == 0


def test_stored_queue_name_outside_the_grammar_is_malformed(connection: Queue, database: str, queue_name: str) -> None:
    """Contract: Malformed stored messages (an invalid stored queue name is malformed data).

    pop() only ever asks for valid names, so a row can carry an invalid one and still be reserved
    only when the database's own comparison matches the two: a trailing space under a PAD SPACE
    collation (MySQL/MariaDB ``ascii_bin``). Elsewhere such a row is on no queue pop() can name.
    """
    connection.push(Noop(), queue=queue_name)
    row = StoredRow(database, queue_name)
    row.corrupt("queue", f"{queue_name} ")
    if not row.matched_by(queue_name):
        assert connection.pop(0.01, [queue_name]) is None
        assert row.exists()
        pytest.skip("this database never matches a stored invalid queue name to a valid one")

    with pytest.raises(MalformedJobSettledError):
        connection.pop(5, [queue_name])

    assert not row.exists()
    assert connection.size(queue_name) == 0


def test_unknown_job_class_is_not_malformed(connection: Queue, database: str, queue_name: str) -> None:
    """Contract: Malformed stored messages (only envelope decoding is the backend's; a class that no longer
    resolves is the worker's JobReconstructionError, handled as the job's own failure)."""
    job_id = connection.push(Records("renamed"), queue=queue_name)
    row = StoredRow(database, queue_name)
    row.corrupt("job_class", "tests.jobs.NoSuchJob")

    delivered = connection.pop(5, [queue_name])

    assert delivered is not None
    assert (delivered.id, delivered.job_class, delivered.attempts) == (job_id, "tests.jobs.NoSuchJob", 1)
    with pytest.raises(JobReconstructionError):
        deserialize_job(delivered.job_class, delivered.args)
    assert row.exists()  # still held, for the worker to release or fail
    connection.fail(delivered)
    assert not row.exists()
    assert connection.size(queue_name) == 0


def test_args_that_no_longer_match_the_class_are_not_malformed(
    connection: Queue, database: str, queue_name: str
) -> None:
    """Contract: Malformed stored messages (well-formed args the class cannot take are schema drift, the
    worker's JobReconstructionError, not malformed data)."""
    job_id = connection.push(Records("drifted"), queue=queue_name)
    row = StoredRow(database, queue_name)
    row.corrupt("args", '{"label": "drifted", "renamed_field": 1}')

    delivered = connection.pop(5, [queue_name])

    assert delivered is not None
    assert delivered.id == job_id
    assert delivered.args == {"label": "drifted", "renamed_field": 1}
    with pytest.raises(JobReconstructionError):
        deserialize_job(delivered.job_class, delivered.args)
    connection.ack(delivered)
    assert not row.exists()
