"""Sensitive values shorter than four characters never reach a failure's log line or record (issue 27 item 14).

A value of 4 characters or more is replaced by ``[redacted]`` where it occurs in an exception's text; a shorter
one (the README's own example token is "k3y") cannot be replaced where it occurs without mangling unrelated text,
so a text in which it occurs as a word of its own is withheld whole (kinetis_queue/payload/redaction.py). On every store
with a real worker: the failed-job record and the worker's log lines.
"""

from __future__ import annotations

import logging
import re

import pytest

from kinetis_queue.contracts import Queue
from kinetis_queue.models import FailedJob
from kinetis_queue.payload.redaction import WITHHELD
from kinetis_queue.worker import Worker
from tests import operator_jobs

SHORT = "k3y"
#: The short value as a word of its own, as a reader would spot it.
AS_WORD = re.compile(rf"(?<![^\W_]){SHORT}(?![^\W_])")


@pytest.mark.trait("stores_jobs")
def test_a_short_sensitive_value_quoted_by_the_exception_withholds_the_text(
    connection: Queue, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = connection.push(operator_jobs.LeaksSecret("visible-label", SHORT), queue=queue_name, max_attempts=1)
    worker = Worker(connection)
    with caplog.at_level(logging.DEBUG, logger="kinetis_queue"):
        try:
            assert worker.process_next(5, [queue_name]) is True
        finally:
            worker.close()
    record = FailedJob.objects.get(job_id=job_id)
    assert (record.exception_class, record.exception_message, record.traceback) == (
        "builtins.ValueError",
        WITHHELD,
        WITHHELD,
    )
    # This project's lines (a client library's own DEBUG lines, botocore's, quote whole requests).
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("kinetis_queue")]
    failure = next(line for line in lines if "failed permanently" in line)
    assert f"ValueError: {WITHHELD}" in failure
    assert not [line for line in lines if AS_WORD.search(line)]


@pytest.mark.trait("stores_jobs")
@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_long_sensitive_value_is_still_redacted_in_place(connection: Queue, queue_name: str) -> None:
    job_id = connection.push(operator_jobs.LeaksSecret("visible-label", "s3cret"), queue=queue_name, max_attempts=1)
    worker = Worker(connection)
    try:
        assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()
    record = FailedJob.objects.get(job_id=job_id)
    assert record.exception_message == "could not use token [redacted] for visible-label"
    assert "ValueError: could not use token [redacted] for visible-label" in record.traceback
