"""Job classes at the edges: alias hints, catch-all handle(), uninspectable handle(), a display_name that raises,
huge ints, and failed.prune's own check (blocks no other test reached)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest

from kinetis_queue import Job, queues
from kinetis_queue.exceptions import InvalidQueueArgumentError, UnrunnableJobError, UnserializableJobError
from kinetis_queue.failed import prune
from kinetis_queue.payload.serializer import MAX_INT_DIGITS
from kinetis_queue.worker import JobReport, Worker
from tests import jobs
from tests.unpushable_jobs import NamesAMissingType

type Count = int
type When = datetime


@dataclass
class CountsByAlias(Job):
    """An argument annotated with a ``type`` alias: the alias's value decides how it is stored."""

    n: Count
    at: When | None = None

    def handle(self) -> None:
        jobs.CALLS.append(("CountsByAlias", self.n, self.at))


class TakesAnything(Job):
    """handle(**kwargs): a catch-all parameter is not an injection point; nothing is passed."""

    def handle(self, *args: Any, **kwargs: Any) -> None:
        jobs.CALLS.append(("TakesAnything", args, kwargs))


class NameThatRaises(Job):
    def handle(self) -> None:
        pass

    @classmethod
    def display_name(cls, args: Any) -> str:
        raise RuntimeError("display_name is broken")


def test_an_argument_typed_by_a_type_alias_comes_back_as_pushed() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    queues["sync"].push(CountsByAlias(7, at))
    assert jobs.CALLS == [("CountsByAlias", 7, at)]
    assert type(jobs.CALLS[0][2]) is datetime


def test_a_catch_all_handle_runs_with_nothing_injected() -> None:
    queues["sync"].push(TakesAnything())
    assert jobs.CALLS == [("TakesAnything", (), {})]


def test_a_handle_that_cannot_be_inspected_names_the_class_and_the_reason() -> None:
    with pytest.raises(UnrunnableJobError) as raised:
        queues["sync"].push(NamesAMissingType())
    assert str(raised.value) == (
        f"{NamesAMissingType.__module__}.NamesAMissingType.handle() parameters cannot be inspected (NameError)"
    )
    assert jobs.CALLS == []


def test_an_int_longer_than_python_reads_back_is_refused_without_its_value() -> None:
    huge = 10**MAX_INT_DIGITS
    with pytest.raises(UnserializableJobError) as raised:
        queues["sync"].push(CountsByAlias(huge))
    assert f"int has more than {MAX_INT_DIGITS} digits" in str(raised.value)
    assert "1000000" not in str(raised.value)
    queues["sync"].push(CountsByAlias(huge - 1))  # the largest that reads back
    assert jobs.CALLS == [("CountsByAlias", huge - 1, None)]


def test_a_display_name_that_raises_falls_back_to_the_stored_class(queue_name: str) -> None:
    queue = queues["sqlite"]
    queue.push(NameThatRaises(), queue=queue_name)
    reports: list[JobReport] = []
    worker = Worker(queue, reporter=reports.append)
    try:
        assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()
    assert [(r.outcome, r.name) for r in reports] == [("succeeded", f"{__name__}.NameThatRaises")]


@pytest.mark.parametrize("hours", [0, -1, "24", None])
def test_prune_in_code_refuses_hours_that_are_not_positive(hours: Any) -> None:
    with pytest.raises(InvalidQueueArgumentError, match="hours must be a positive number"):
        prune(hours)


def test_call_handle_runs_an_async_handle_to_its_end() -> None:
    """The sync backend's inline run: an ``async def handle`` is awaited, not left as a coroutine."""
    import logging

    from kinetis_queue.job import JobContext, call_handle
    from tests import concurrency_jobs

    concurrency_jobs.reset()
    context = JobContext("id", "default", 1, None, None, logging.getLogger("test"))
    call_handle(concurrency_jobs.AsyncSleeps(0, "inline"), context)
    assert concurrency_jobs.STARTED == ["inline"]
