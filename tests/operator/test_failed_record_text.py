"""The failed-job write never fails because of the text it stores, on every database (issue 12, item 5).

ModelRecorder.record() escapes what a database refuses (NUL on PostgreSQL, lone surrogates on every
driver) and control characters in one-line fields, cuts each text to its column's width with a
marker, and records an exception whose str() or traceback cannot be produced with a note instead.
The FailedJob table is routed to each SQL database in turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.test import override_settings

from kinetis_queue.contracts import QueuedJob
from kinetis_queue.failed import MAX_RECORDED_TEXT, TRUNCATION_MARKER, ModelRecorder, storable
from kinetis_queue.models import FailedJob

DATABASES = ["default", "postgres", "mariadb"]


class _FailedJobsTo:
    """A database router sending the FailedJob table to one alias."""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def db_for_read(self, model: type, **hints: Any) -> str | None:
        return self.alias if model is FailedJob else None

    db_for_write = db_for_read


@pytest.fixture(params=DATABASES)
def database(request: pytest.FixtureRequest) -> Iterator[str]:
    with override_settings(DATABASE_ROUTERS=[_FailedJobsTo(request.param)]):
        yield request.param


class HostileMessage(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)


class StrExits(Exception):
    """str() raises SystemExit: both the message and Python's traceback formatter fail."""

    def __str__(self) -> str:
        raise SystemExit("no text")


class StrRaises(Exception):
    def __str__(self) -> str:
        raise ValueError("no text")


class _NotesThatRaise(list[str]):
    def __iter__(self) -> Any:
        raise RuntimeError("the traceback formatter fails here")


def _formatter_fails() -> Exception:
    error = ValueError("plain message")
    error.__notes__ = _NotesThatRaise()
    return error


class OddlyNamed(Exception):
    pass


OddlyNamed.__qualname__ = "Odd\x00Name\ud800" + "N" * 300


def _job(job_class: str, queue: str = "q") -> QueuedJob:
    return QueuedJob(
        id="0" * 32,
        queue=queue,
        job_class=job_class,
        args={"label": "x\x00\ud800"},
        attempts=1,
        max_attempts=1,
        pushed_at=datetime.now(UTC),
        metadata={"m": "\x00"},
    )


def _stored(database: str, pk: int) -> FailedJob:
    return FailedJob.objects.using(database).get(pk=pk)


def test_nul_surrogates_and_controls_are_escaped_visibly(database: str) -> None:
    error = HostileMessage("NUL \x00, surrogate \ud800, escape \x1b[0m, tab\tand\nnewline")
    pk = ModelRecorder().record(_job("tests.jobs.Rec\x00ords\ud800\x1b"), error, "sqlite")
    record = _stored(database, pk)
    assert record.job_class == "tests.jobs.Rec\\x00ords\\ud800\\x1b"
    assert record.exception_message == "NUL \\x00, surrogate \\ud800, escape \\x1b[0m, tab\tand\nnewline"
    assert "NUL \\x00, surrogate \\ud800" in record.traceback
    assert record.args == '{"label":"x\\u0000\\ud800"}' and record.metadata == '{"m":"\\u0000"}'


def test_over_long_texts_are_cut_to_the_column_with_a_marker(database: str) -> None:
    long_class = "tests." + "c" * 400
    pk = ModelRecorder().record(_job(long_class), OddlyNamed("m" * (MAX_RECORDED_TEXT + 10)), "c" * 100)
    record = _stored(database, pk)
    assert len(record.job_class) == 255 and record.job_class.endswith(TRUNCATION_MARKER)
    assert record.job_class.startswith("tests.ccc")
    assert len(record.exception_class) == 255 and record.exception_class.endswith(TRUNCATION_MARKER)
    assert "Odd\\x00Name\\ud800" in record.exception_class
    assert record.connection == "c" * (64 - len(TRUNCATION_MARKER)) + TRUNCATION_MARKER
    assert len(record.exception_message) == MAX_RECORDED_TEXT
    assert record.exception_message.endswith(TRUNCATION_MARKER)


@pytest.mark.parametrize("error", [StrRaises(), StrExits()], ids=["str-raises", "str-raises-system-exit"])
def test_an_exception_that_cannot_be_shown_is_recorded_with_a_note(database: str, error: Exception) -> None:
    pk = ModelRecorder().record(_job("tests.jobs.Records"), error, None)
    record = _stored(database, pk)
    raised = "SystemExit" if isinstance(error, StrExits) else "ValueError"
    assert record.exception_message == f"(the exception's message is unavailable: str() raised {raised})"
    assert record.exception_class.endswith(type(error).__qualname__)
    assert record.connection is None
    assert "<exception str() failed>" in record.traceback


def test_a_traceback_formatter_that_raises_is_recorded_with_a_note(database: str) -> None:
    pk = ModelRecorder().record(_job("tests.jobs.Records"), _formatter_fails(), None)
    record = _stored(database, pk)
    assert record.exception_message == "plain message"
    assert record.traceback == "builtins.ValueError (traceback unavailable)"


def test_storable_escapes_then_cuts() -> None:
    assert storable("a\x00b", 10) == "a\\x00b"
    assert storable("line\nbreak", 20) == "line\\x0abreak"
    assert storable("line\nbreak", 20, lines=True) == "line\nbreak"
    assert storable("x" * 30, 20) == "x" * 6 + TRUNCATION_MARKER
    assert storable("é€𝄞", 10) == "é€𝄞"  # valid text, astral plane included, is kept
