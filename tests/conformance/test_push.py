"""Conformance: push() on every backend (contract: "What push() guarantees", "Queue names", "Delayed jobs")."""

from __future__ import annotations

import logging
import re
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from kinetis_queue import Job, JobContext
from kinetis_queue.contracts import PreparedPush, Queue
from kinetis_queue.exceptions import InvalidQueueArgumentError, UnserializableJobError
from kinetis_queue.job import call_handle
from kinetis_queue.payload.envelope import Envelope
from kinetis_queue.payload.serializer import deserialize_job
from tests import jobs
from tests.jobs import Color, Records
from tests.support.backends import Backend
from tests.unpushable_jobs import LongNamedJob

JOB_ID = re.compile(r"[0-9a-f]{32}")


class SeesMaxAttempts(Job):
    """Records the max_attempts its delivery carries."""

    def __init__(self, label: str) -> None:
        self.label = label

    def handle(self, context: JobContext) -> None:
        jobs.CALLS.append(("SeesMaxAttempts", self.label, context.max_attempts))


class ForgetsItsArgument(Job):
    """Its __init__ parameter has no same-named attribute, so push() cannot read it back."""

    def __init__(self, value: int) -> None:
        self.other = value

    def handle(self) -> None:
        jobs.CALLS.append(("ForgetsItsArgument",))


def _run_delivered(connection: Queue, backend: Backend, queue: str) -> None:
    """Run the job pushed to ``queue`` the way a worker would: pop, rebuild from what was stored, handle, ack.

    On a backend that does not store jobs, push() already ran it inline (rebuilt from its serialized
    form), so there is nothing to deliver.
    """
    if not backend.stores_jobs:
        return
    delivered = connection.pop(5, [queue])
    assert delivered is not None
    job = deserialize_job(delivered.job_class, delivered.args)
    context = JobContext(
        delivered.id, delivered.queue, delivered.attempts, delivered.max_attempts, None, logging.getLogger(__name__)
    )
    call_handle(job, context)
    connection.ack(delivered)


def _spy_on_push_primitive(connection: Queue, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Record every call that reaches the backend's own push primitive (the first I/O of a push)."""
    calls: list[Any] = []
    real = connection._push

    def spy(*args: Any) -> None:
        calls.append(args)
        real(*args)

    monkeypatch.setattr(connection, "_push", spy)
    return calls


@pytest.mark.parametrize(
    "delay",
    [-1, -0.001, float("nan"), float("inf"), True, False, "1", None, timedelta(seconds=-1)],
    ids=["minus-1", "minus-epsilon", "nan", "inf", "true", "false", "str", "none", "negative-timedelta"],
)
def test_invalid_delay_is_rejected_before_anything_is_stored(
    connection: Queue, queue_name: str, delay: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contract: What push() guarantees (delay is 0 or a positive number of seconds, checked before I/O)."""
    reached_backend = _spy_on_push_primitive(connection, monkeypatch)

    with pytest.raises(InvalidQueueArgumentError):
        connection.push(Records("never"), delay=delay, queue=queue_name)

    assert reached_backend == []
    assert connection.size(queue_name) == 0
    assert jobs.CALLS == []


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("", id="empty"),
        pytest.param("a" * 81, id="81-chars"),
        pytest.param("a b", id="space"),
        pytest.param("a.b", id="dot"),
        pytest.param("a/b", id="slash"),
        pytest.param("é", id="non-ascii"),
        pytest.param("name\n", id="trailing-newline"),
        pytest.param(" name", id="leading-space"),
        pytest.param(5, id="int"),
        pytest.param(None, id="none"),
        pytest.param(b"name", id="bytes"),
        pytest.param(["name"], id="list"),
    ],
)
def test_invalid_queue_name_is_rejected_before_anything_is_stored(
    connection: Queue, name: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contract: Queue names (push() validates the name against ^[A-Za-z0-9_-]{1,80}$ before any I/O)."""
    reached_backend = _spy_on_push_primitive(connection, monkeypatch)

    with pytest.raises(InvalidQueueArgumentError):
        connection.push(Records("never"), queue=name)  # type: ignore[arg-type]

    assert reached_backend == []
    assert jobs.CALLS == []


def test_longest_valid_queue_name_is_accepted(connection: Queue, backend: Backend, queue_name: str) -> None:
    """Contract: Queue names (80 characters of letters, digits, '-' and '_' is the upper bound, inclusive)."""
    name = (queue_name + "-_AZaz09" * 10)[: backend.longest_queue_name]  # SQS FIFO: 75, for ".fifo"

    connection.push(Records("longest"), queue=name)
    _run_delivered(connection, backend, name)

    assert [call[1] for call in jobs.CALLS] == ["longest"]
    assert connection.size(name) == 0


@pytest.mark.parametrize(
    "max_attempts", [-1, True, False, 1.0, 3.5, "3"], ids=["minus-1", "true", "false", "float", "fraction", "str"]
)
def test_invalid_max_attempts_is_rejected_before_anything_is_stored(
    connection: Queue, queue_name: str, max_attempts: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contract: What push() guarantees (max_attempts is None or an int of 0 or more)."""
    reached_backend = _spy_on_push_primitive(connection, monkeypatch)

    with pytest.raises(InvalidQueueArgumentError):
        connection.push(Records("never"), queue=queue_name, max_attempts=max_attempts)  # type: ignore[arg-type]

    assert reached_backend == []
    assert connection.size(queue_name) == 0
    assert jobs.CALLS == []


@pytest.mark.parametrize(
    "job",
    [
        pytest.param(Records("x", (1, 2)), id="tuple"),  # type: ignore[arg-type]
        pytest.param(Records("x", {1, 2}), id="set"),  # type: ignore[arg-type]
        pytest.param(Records("x", [1, (2,)]), id="nested-tuple"),  # type: ignore[list-item]
        pytest.param(Records("x", {1: 2}), id="int-keyed-dict"),  # type: ignore[arg-type]
        pytest.param(Records("x", [float("nan")]), id="nan"),  # type: ignore[list-item]
        pytest.param(Records("x", b"raw"), id="bytes"),  # type: ignore[arg-type]
        pytest.param(Records("x", color="red"), id="str-for-enum"),  # type: ignore[arg-type]
        pytest.param(Records("x", when=datetime(2024, 1, 1)), id="naive-datetime"),
        pytest.param(ForgetsItsArgument(1), id="no-same-named-attribute"),
    ],
)
def test_unserializable_job_is_rejected_and_nothing_is_stored(
    connection: Queue, queue_name: str, job: Job, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contract: What push() guarantees (the job is serialized before the backend is contacted)."""
    reached_backend = _spy_on_push_primitive(connection, monkeypatch)

    with pytest.raises(UnserializableJobError):
        connection.push(job, queue=queue_name)

    assert reached_backend == []
    assert connection.size(queue_name) == 0
    assert jobs.CALLS == []


def test_push_returns_a_distinct_32_hex_id_that_the_delivery_carries(
    connection: Queue, backend: Backend, queue_name: str
) -> None:
    """Contract: Backend mechanisms (id is 32 random hexadecimal characters; identical jobs stay distinct)."""
    first = connection.push(Records("same"), queue=queue_name)
    second = connection.push(Records("same"), queue=queue_name)

    assert JOB_ID.fullmatch(first), first
    assert JOB_ID.fullmatch(second), second
    assert first != second
    if backend.stores_jobs:
        delivered = [connection.pop(5, [queue_name]) for _ in range(2)]
        assert [job.id for job in delivered if job is not None] == [first, second]
        for job in delivered:
            assert job is not None
            connection.ack(job)
        assert connection.size(queue_name) == 0
    else:
        assert [call[1] for call in jobs.CALLS] == ["same", "same"]


def test_pushed_arguments_come_back_equal_with_exact_types(
    connection: Queue, backend: Backend, queue_name: str
) -> None:
    """Contract: Job arguments (a non-ASCII string, a list, an Enum member and an aware datetime come back
    equal and of the same types)."""
    when = datetime(2024, 2, 29, 23, 59, 58, 123456, tzinfo=timezone(timedelta(hours=5, minutes=30)))

    text = 'héllo ✓ 🚀 \x00 "quoted" \\ end'

    connection.push(Records(text, [1, 2, 3], Color.BLUE, when), queue=queue_name)
    _run_delivered(connection, backend, queue_name)

    assert len(jobs.CALLS) == 1
    name, label, items, color, seen_when, attempts, queue = jobs.CALLS[0]
    assert (name, label, items, color, seen_when, attempts, queue) == (
        "Records",
        text,
        [1, 2, 3],
        Color.BLUE,
        when,
        1,
        queue_name,
    )
    assert type(label) is str
    assert type(items) is list
    assert all(type(item) is int for item in items)
    assert type(color) is Color
    assert type(seen_when) is datetime
    assert seen_when.utcoffset() == when.utcoffset()
    assert connection.size(queue_name) == 0


@pytest.mark.trait("stores_jobs")
def test_delivery_reports_what_was_pushed(connection: Queue, queue_name: str) -> None:
    """Contract: Backend mechanisms (the envelope: id, pushedAt, class, args, attempts, maxAttempts)."""
    before = time.time()
    job_id = connection.push(Records("label", [1]), queue=queue_name, max_attempts=4)
    after = time.time()

    delivered = connection.pop(5, [queue_name])

    assert delivered is not None
    assert delivered.id == job_id
    assert delivered.queue == queue_name
    assert delivered.job_class == "tests.jobs.Records"
    assert delivered.args == {"label": "label", "items": [1], "color": None, "when": None}
    assert delivered.attempts == 1
    assert delivered.max_attempts == 4
    assert delivered.pushed_at.tzinfo is not None
    assert before - 1 <= delivered.pushed_at.timestamp() <= after + 1
    connection.ack(delivered)
    assert connection.size(queue_name) == 0


@pytest.mark.parametrize("max_attempts", [None, 0, 1, 3])
def test_max_attempts_travels_with_the_job(
    connection: Queue, backend: Backend, queue_name: str, max_attempts: int | None
) -> None:
    """Contract: What push() guarantees (None defers to the worker's default; 0 or more is the cap itself)."""
    connection.push(SeesMaxAttempts("capped"), queue=queue_name, max_attempts=max_attempts)
    _run_delivered(connection, backend, queue_name)

    assert jobs.CALLS == [("SeesMaxAttempts", "capped", max_attempts)]
    assert connection.size(queue_name) == 0


@pytest.mark.parametrize("delay", [0, 0.0, timedelta(0)], ids=["int", "float", "timedelta"])
def test_zero_delay_is_immediate(connection: Queue, backend: Backend, queue_name: str, delay: object) -> None:
    """Contract: What push() guarantees (a delay of 0 is immediate, in any accepted form)."""
    connection.push(Records("now"), delay=delay, queue=queue_name)

    # _run_delivered's pop(5) returns at the first sweep when the job is due at once; the ack and
    # the final size prove it was the one delivery.
    _run_delivered(connection, backend, queue_name)

    assert [call[1] for call in jobs.CALLS] == ["now"]
    assert connection.size(queue_name) == 0


@pytest.mark.trait("stores_jobs")
def test_delay_is_a_floor(connection: Queue, queue_name: str) -> None:
    """Contract: Delayed jobs (a job is not poppable before its delay elapses; it counts as waiting)."""
    start = time.monotonic()
    job_id = connection.push(Records("later"), delay=1.5, queue=queue_name)

    assert connection.size(queue_name) == 1
    assert connection.pop(0.2, [queue_name]) is None
    delivered = connection.pop(5, [queue_name])
    elapsed = time.monotonic() - start

    assert delivered is not None
    assert delivered.id == job_id
    assert delivered.attempts == 1
    # A correctness property of the floor, not a speed claim: no upper bound is asserted.
    assert elapsed >= 1.5, f"delivered {elapsed:.3f}s after push, before its 1.5s delay"
    connection.ack(delivered)
    assert connection.size(queue_name) == 0


@pytest.mark.trait("stores_jobs")
@pytest.mark.trait("counts_delayed_push")
def test_timedelta_delay_is_read_as_its_length(connection: Queue, queue_name: str) -> None:
    """Contract: What push() guarantees (a delay may be given as a timedelta; DESIGN.md §1)."""
    connection.push(Records("later"), delay=timedelta(minutes=1), queue=queue_name)

    # Held back, yet waiting work. A minute outlasts the test; one sweep is all the look needs.
    assert connection.size(queue_name) == 1
    assert connection.pop(0.01, [queue_name]) is None
    assert connection.size(queue_name) == 1


@pytest.mark.trait("stores_jobs")
def test_delayed_job_does_not_hold_back_a_due_one(connection: Queue, queue_name: str, backend: Backend) -> None:
    """Contract: Delayed jobs (a delayed job is skipped, not waited for, by a pop() on its queue)."""
    connection.push(Records("later"), delay=60, queue=queue_name)
    due = connection.push(Records("now"), queue=queue_name)

    delivered = connection.pop(5, [queue_name])

    assert delivered is not None
    assert delivered.id == due
    connection.ack(delivered)
    # SQS FIFO: the pop met the delayed message and hid it for the rest of its delay (out of size()).
    assert connection.size(queue_name) == (1 if backend.counts_delayed_push else 0)


@pytest.mark.trait("stores_jobs")
@pytest.mark.parametrize(
    ("job", "max_attempts"),
    [
        pytest.param(Records("x"), 2**31, id="max-attempts-2**31"),
        pytest.param(Records("x"), 2**63, id="max-attempts-2**63"),
        pytest.param(LongNamedJob(), None, id="class-path-over-255-chars"),
    ],
)
def test_a_push_that_returns_is_delivered_intact(
    connection: Queue, queue_name: str, job: Job, max_attempts: int | None
) -> None:
    """Contract: What push() guarantees (a push() that returns has a stored job behind it; a value the backend
    cannot hold is an error raised before any I/O, with nothing stored)."""
    try:
        job_id = connection.push(job, queue=queue_name, max_attempts=max_attempts)
    except (InvalidQueueArgumentError, UnserializableJobError):
        assert connection.size(queue_name) == 0
        return

    delivered = connection.pop(5, [queue_name])

    assert delivered is not None
    assert (delivered.id, delivered.max_attempts) == (job_id, max_attempts)
    connection.ack(delivered)
    assert connection.size(queue_name) == 0


def test_prepare_reaches_no_backend_and_send_stores_the_job_it_prepared(
    connection: Queue, backend: Backend, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contract: What push() guarantees (validated and serialized before the backend is contacted), through
    the public two-phase push: prepare() does no I/O, send() stores that job under the id prepare() gave it."""
    reached_backend = _spy_on_push_primitive(connection, monkeypatch)

    prepared = connection.prepare(Records("two-phase", [1]), queue=queue_name, max_attempts=2)

    assert reached_backend == []
    assert connection.size(queue_name) == 0
    assert jobs.CALLS == []
    assert isinstance(prepared, PreparedPush)
    assert (prepared.queue, prepared.delay, prepared.envelope.max_attempts) == (queue_name, 0.0, 2)
    assert JOB_ID.fullmatch(prepared.id)

    assert connection.send(prepared) == prepared.id
    assert len(reached_backend) == 1
    if backend.stores_jobs:
        delivered = connection.pop(5, [queue_name])
        assert delivered is not None
        assert (delivered.id, delivered.args["label"], delivered.max_attempts) == (prepared.id, "two-phase", 2)
        connection.ack(delivered)
    else:
        assert [call[1] for call in jobs.CALLS] == ["two-phase"]
    assert connection.size(queue_name) == 0


@pytest.mark.trait("stores_jobs")
def test_a_prepared_push_built_from_a_delivery_stores_its_replacement(connection: Queue, queue_name: str) -> None:
    """Contract: Settlement (a replacement keeps the job id): send() stores an envelope built from a delivered
    job as it is, the way the worker stores a snoozed job's replacement (same id, attempts over, new metadata)."""
    job_id = connection.push(Records("again"), queue=queue_name, max_attempts=3)
    first = connection.pop(5, [queue_name])
    assert first is not None

    replacement = Envelope(first.id, time.time(), first.job_class, first.args, 0, first.max_attempts, {"snoozes": 1})
    assert connection.send(PreparedPush(replacement, 0, first.queue)) == job_id
    connection.ack(first)

    second = connection.pop(5, [queue_name])
    assert second is not None
    assert (second.id, second.args, second.attempts, second.max_attempts) == (job_id, first.args, 1, 3)
    assert second.metadata["snoozes"] == 1
    connection.ack(second)
    assert connection.size(queue_name) == 0
