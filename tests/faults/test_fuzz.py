"""H1-H3, the argument contract and the decoders under Hypothesis, on every backend (RELIABILITY.md §3 H).

tests/core/test_serializer.py proves the contract without a backend (round trips through strict JSON, every
rejection, its location and what a message may show). Here the same values go through each backend:

- H1: values inside the contract, pushed and popped: ``args`` come back equal with exact types (True
  is not 1, 1 is not 1.0, -0.0 keeps its sign, floats by repr, map order kept), top-level Enum members
  and aware datetimes come back from their annotations; the nesting bound (32 levels accepted, 33
  rejected) and the int bound (4,300 digits) are pinned per backend.
- H2: values outside it: ``UnserializableJobError`` naming the argument and the location, never the
  value, nor the location of a Sensitive argument; and nothing reaches the store (size 0, no run on sync).
- H3: random bytes and mutated envelopes through each backend's own decode path (Redis member, SQL row,
  SQS message, AMQP body and headers): a valid QueuedJob or MalformedQueuedJobDataError, nothing else.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import math
import re
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinetis_queue import Job
from kinetis_queue.contracts import Queue, QueuedJob
from kinetis_queue.exceptions import MalformedQueuedJobDataError, UnserializableJobError
from kinetis_queue.job import job_class_path
from kinetis_queue.payload.serializer import MAX_DEPTH, MAX_INT_DIGITS, deserialize_job, serialize_job
from tests.core.test_serializer import SECRET, MyDatetime, Opaque, assert_same, located, nested
from tests.faults import checker, stores
from tests.faults.fuzz_jobs import RAN, Guarded, Payload, Shade, Size
from tests.support.backends import Backend
from tests.unpushable_jobs import Forgetful, StarArgs

pytestmark = pytest.mark.fault

# The jobs (Payload, Guarded and their enums) live in tests/faults/fuzz_jobs.py.


# -- H1: accept and round-trip ---------------------------------------------------------------------

texts = st.text(st.characters(codec="utf-8"), max_size=12)  # NUL, astral planes; never a lone surrogate
ints = st.integers() | st.sampled_from(
    [0, -1, 2**31, 2**53 + 1, -(2**63), 2**64, 10**MAX_INT_DIGITS - 1, -(10**MAX_INT_DIGITS - 1)]
)
floats = st.floats(allow_nan=False, allow_infinity=False) | st.sampled_from(
    [-0.0, 0.0, 5e-324, -5e-324, 1.7976931348623157e308, 0.1, 1 / 3, 1e16, 2.0**53 + 2]
)
scalars = st.none() | st.booleans() | ints | floats | texts
values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=25,
)
moments = st.builds(
    lambda moment, minutes: moment.replace(tzinfo=timezone(timedelta(minutes=minutes))),
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
    st.integers(-1439, 1439),
)


def same_floats(original: Any, restored: Any) -> None:
    """Floats round-trip by repr (assert_same compares them by value and sign)."""
    if type(original) is float:
        assert repr(restored) == repr(original)
    elif type(original) is list:
        for left, right in zip(original, restored, strict=True):
            same_floats(left, right)
    elif type(original) is dict:
        for key in original:
            same_floats(original[key], restored[key])


def deliver(backend: Backend, queue: Queue, job: Job, queue_name: str) -> tuple[dict[str, Any] | None, Job]:
    """Push ``job`` and take it back: (the args as popped, the job rebuilt). Sync runs it inside push()."""
    if not backend.stores_jobs:
        RAN.clear()
        queue.push(job, queue=queue_name)
        (ran,) = RAN
        return None, ran
    job_id = queue.push(job, queue=queue_name)
    popped = queue.pop(5, [queue_name])
    assert popped is not None and popped.id == job_id
    queue.ack(popped)
    return popped.args, deserialize_job(popped.job_class, popped.args)


def write_report(scenario: str, backend: Backend, **figures: Any) -> None:
    checker.write(checker.check([], scenario=scenario, backend=backend.id, seed=0, extra=figures))


@pytest.mark.timeout(180)
def test_values_inside_the_contract_come_back_with_exact_types(
    backend: Backend, connection: Queue, queue_name: str
) -> None:
    """H1: 100 examples per backend (derandomized): push, pop, compare args and the rebuilt job."""
    counts = Counter[str]()
    started = time.monotonic()

    @settings(settings.get_profile("kq-ci"), max_examples=100)
    @given(value=values, shade=st.sampled_from(Shade), size=st.none() | st.sampled_from(Size), at=st.none() | moments)
    def round_trip(value: Any, shade: Shade, size: Size | None, at: datetime | None) -> None:
        counts["examples"] += 1
        job = Payload(value, shade, size, at)
        args, restored = deliver(backend, connection, job, queue_name)
        if args is not None:
            assert_same(serialize_job(job)[1], args)
        assert isinstance(restored, Payload)
        assert_same(value, restored.value)
        same_floats(value, restored.value)
        assert restored.shade is shade and restored.size is size
        if at is None:
            assert restored.at is None
        else:
            assert type(restored.at) is datetime and restored.at == at and restored.at.utcoffset() == at.utcoffset()

    round_trip()
    write_report(
        "H1-round-trip",
        backend,
        examples=counts["examples"],
        mismatches=0,
        seconds=round(time.monotonic() - started, 2),
    )
    assert connection.size(queue_name) == 0


@pytest.mark.timeout(60)
def test_the_nesting_and_int_bounds_are_the_same_on_every_backend(
    backend: Backend, connection: Queue, queue_name: str
) -> None:
    """H1: 32 levels (a top-level list holding scalars is level 1) and 4,300 digits pass; one more does not."""
    for kind in ("list", "dict"):
        value = nested(MAX_DEPTH, kind)
        assert_same(value, deliver(backend, connection, Payload(value), queue_name)[1].value)  # type: ignore[attr-defined]
        step = "[0]" if kind == "list" else ".{0}"
        with pytest.raises(UnserializableJobError) as raised:
            connection.push(Payload(nested(MAX_DEPTH + 1, kind)), queue=queue_name)
        assert str(raised.value) == (
            f"{job_class_path(Payload)} argument value{step * MAX_DEPTH}: nested deeper than {MAX_DEPTH} levels"
        )
    for sign in (1, -1):
        widest = sign * (10**MAX_INT_DIGITS - 1)
        assert deliver(backend, connection, Payload([widest]), queue_name)[1].value == [widest]  # type: ignore[attr-defined]
        with pytest.raises(UnserializableJobError, match=rf"argument value\[0\]: int has more than {MAX_INT_DIGITS}"):
            connection.push(Payload([sign * 10**MAX_INT_DIGITS]), queue=queue_name)
    assert connection.size(queue_name) == 0


# -- H2: rejection ---------------------------------------------------------------------------------

#: (a factory of a value outside the contract, what the message says). Fresh per use: some are mutable.
NESTED_BAD: list[tuple[Callable[[], Any], str]] = [
    (lambda: (SECRET,), "a tuple is not allowed"),
    (lambda: {SECRET}, "a set is not allowed"),
    (lambda: frozenset({SECRET}), "a set is not allowed"),
    (lambda: SECRET.encode(), "bytes are not allowed"),
    (lambda: bytearray(SECRET.encode()), "bytes are not allowed"),
    (lambda: Decimal("1.5"), "a Decimal is not allowed"),
    (lambda: Opaque(), "Opaque is not allowed"),
    (lambda: object(), "a object is not allowed"),
    (lambda: float("nan"), "float is not finite"),
    (lambda: float("inf"), "float is not finite"),
    (lambda: float("-inf"), "float is not finite"),
    (lambda: SECRET + "\ud800", "string is not valid UTF-8"),
    (lambda: 10**MAX_INT_DIGITS, f"int has more than {MAX_INT_DIGITS} digits"),
    (lambda: Shade.LIGHT, "an Enum member is allowed only as a top-level argument"),
    (lambda: datetime(2024, 1, 2, tzinfo=UTC), "a datetime is allowed only as a top-level argument"),
]
#: Inside a map: the key is the culprit, and the location is the entry's position.
KEY_BAD: list[tuple[Callable[[], Any], str]] = [
    (lambda: {987654321: SECRET}, "map key is not a string"),
    (lambda: {(SECRET,): 1}, "map key is not a string"),
    (lambda: {SECRET + "\udc00": 1}, "map key is not valid UTF-8"),
]
#: Allowed nowhere under an ``Any`` annotation, top level included.
TOP_BAD: list[tuple[Callable[[], Any], str]] = [
    (lambda: datetime(2024, 1, 2, 3, 4, 5), "a naive datetime is not allowed"),
    (lambda: MyDatetime(2024, 1, 2, tzinfo=UTC), "MyDatetime is not allowed"),
    (lambda: Shade.DARK, "an Enum member needs a parameter annotated with exactly its Enum class"),
    (lambda: datetime(2024, 1, 2, tzinfo=UTC), "a datetime needs a parameter annotated with exactly datetime"),
]


def _cycle() -> list[Any]:
    looped: list[Any] = [SECRET]
    looped.append(looped)
    return looped


@st.composite
def outside_the_contract(draw: st.DrawFn) -> tuple[Any, str, str]:
    """(value, location, reason): a bad value, buried in random lists and maps or at the top level."""
    shape = draw(st.sampled_from(["nested", "key", "top", "deep", "cycle"]))
    if shape == "top":
        make, reason = draw(st.sampled_from(TOP_BAD))
        return make(), "", reason
    if shape == "deep":
        kind = draw(st.sampled_from(["list", "dict"]))
        extra = draw(st.integers(1, 40))
        step = "[0]" if kind == "list" else ".{0}"
        return nested(MAX_DEPTH + extra, kind, SECRET), step * MAX_DEPTH, f"nested deeper than {MAX_DEPTH} levels"
    if shape == "cycle":
        return _cycle(), "[1]" * MAX_DEPTH, f"nested deeper than {MAX_DEPTH} levels"
    make, reason = draw(st.sampled_from(NESTED_BAD if shape == "nested" else KEY_BAD))
    value, location = draw(located(make()))
    return value, location + (".{0}" if shape == "key" else ""), reason


def _shown(value: Any) -> str:
    """repr(value), or a marker no message holds when the value cannot be shown (an int past the digit limit)."""
    try:
        return repr(value)
    except ValueError:
        return "\x00unshowable"


@pytest.mark.timeout(120)
def test_values_outside_the_contract_are_refused_before_any_write(
    backend: Backend, connection: Queue, queue_name: str
) -> None:
    """H2: 50 examples per backend (350 in all), a plain and a Sensitive argument; then nothing is stored."""
    store = stores.store_for(backend, connection)
    counts = Counter[str]()
    RAN.clear()

    @settings(settings.get_profile("kq-ci"), max_examples=50)
    @given(bad=outside_the_contract(), sensitive=st.booleans())
    def refused(bad: tuple[Any, str, str], sensitive: bool) -> None:
        value, location, reason = bad
        counts["examples"] += 1
        job = Guarded(token=value) if sensitive else Guarded(note=value)
        with pytest.raises(UnserializableJobError) as raised:
            connection.push(job, queue=queue_name)
        message = str(raised.value)
        assert "s3cr3t" not in message.lower() and "987654321" not in message and "2024" not in message
        assert _shown(value) not in message
        if sensitive:
            assert message == (
                f"{job_class_path(Guarded)} argument token: the value does not meet the argument "
                "contract (details withheld: the argument is Sensitive)"
            )
        else:
            assert message.startswith(f"{job_class_path(Guarded)} argument note{location}: "), message
            assert reason in message

    refused()
    for job in (StarArgs(1), Forgetful(1)):
        with pytest.raises(UnserializableJobError):
            connection.push(job, queue=queue_name)
    remaining = store.remaining(queue_name) if store is not None else None
    write_report("H2-rejection", backend, examples=counts["examples"] + 2, leaks=0, writes=remaining or len(RAN))
    assert RAN == [] and connection.size(queue_name) == 0 and remaining in (None, 0)


# -- H3: decoder fuzz ------------------------------------------------------------------------------

#: Placeholders swapped into the JSON text after encoding (json.dumps cannot write them).
DEEP, HUGE_INT, HUGE_FLOAT, SURROGATE = "\x00deep:", "\x00huge-int", "\x00huge-float", "\x00surrogate"

odd_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([-1, 2**31, 10**30, -(10**30)])
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from([HUGE_INT, HUGE_FLOAT, SURROGATE])
    | st.sampled_from([33, 34, 1000, 100_000]).map(lambda depth: f"{DEEP}{depth}"),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=6,
)


def _placeholders(text: str) -> str:
    text = re.sub(r'"\\u0000deep:(\d+)"', lambda m: "[" * int(m.group(1)) + "]" * int(m.group(1)), text)
    return (
        text.replace('"\\u0000huge-int"', "9" * 5000)
        .replace('"\\u0000huge-float"', "1e400")
        .replace('"\\u0000surrogate"', '"\\ud800"')
    )


@st.composite
def mutated(draw: st.DrawFn, base: dict[str, Any]) -> bytes:
    """``base`` as JSON after 0-3 structural mutations (drop, retype, add a key; NaN, deep, huge values)
    and maybe a text mutation (duplicate key, truncation, an invalid UTF-8 byte); or random bytes."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=64))
    data = dict(base)
    for _ in range(max(0, draw(st.integers(-3, 3)))):  # none half the time
        operation = draw(st.sampled_from(["drop", "retype", "add", "args"]))
        key = draw(st.sampled_from(sorted(base)))
        if operation == "drop":
            data.pop(key, None)
        elif operation == "retype":
            data[key] = draw(odd_json)
        elif operation == "add":
            data[draw(st.text(max_size=6))] = draw(odd_json)
        else:
            data["args"] = {"x": draw(odd_json)}
    text = _placeholders(json.dumps(data))  # NaN and Infinity literals come from st.floats()
    edit = draw(st.sampled_from(["none", "none", "duplicate", "truncate", "byte"]))
    if edit == "duplicate" and text.startswith("{") and data:
        text = "{" + json.dumps(next(iter(data))) + ":0," + text[1:]
    elif edit == "truncate":
        text = text[: draw(st.integers(0, max(0, len(text) - 1)))]
    raw = text.encode("utf-8", "surrogatepass")
    if edit == "byte":
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + b"\xff" + raw[at:]
    return raw


def _envelope() -> dict[str, Any]:
    return {
        "id": "0" * 32,
        "pushedAt": 1_700_000_000.5,
        "class": "tests.faults.jobs.Tagged",
        "args": {"tag": "t"},
        "attempts": 0,
        "maxAttempts": 3,
        "metadata": {"trace": "x"},
    }


def _body() -> dict[str, Any]:
    return {k: v for k, v in _envelope().items() if k in ("id", "pushedAt", "class", "args")}


odd_value = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=6)
    | st.binary(max_size=6)
    | st.sampled_from([Decimal("1"), -1, 2**31, 10**30, [], {}, "abc", "1e3", " 1", "01", "9" * 30])
)


def _maybe(valid: Any) -> st.SearchStrategy[Any]:
    """The valid value seven times in eight, an odd one otherwise."""
    return st.integers(0, 7).flatmap(lambda n: odd_value if n == 0 else st.just(valid))


def _decode_redis(data: bytes) -> QueuedJob:
    from kinetis_queue.backends.redis import RedisQueue

    return RedisQueue._delivery("q", data)


@st.composite
def redis_members(draw: st.DrawFn) -> tuple[Callable[..., QueuedJob], tuple[Any, ...]]:
    return _decode_redis, (draw(mutated(_envelope())),)


def _decode_sql(row: tuple[Any, ...]) -> QueuedJob:
    from kinetis_queue.backends.sql import SqlHandle, SqlQueue

    return SqlQueue._decode(row, SqlHandle(1, "0" * 32))


@st.composite
def sql_rows(draw: st.DrawFn) -> tuple[Callable[..., QueuedJob], tuple[Any, ...]]:
    def text(base: dict[str, Any]) -> Any:
        raw = draw(mutated(base))
        return raw if draw(st.booleans()) else raw.decode("utf-8", "replace")  # SQLite may hand back a BLOB

    row = (
        1,
        draw(_maybe("0" * 32)),
        draw(_maybe("q")),
        draw(_maybe("tests.faults.jobs.Tagged")),
        text({"tag": "t"}),
        text({"trace": "x"}),
        draw(_maybe(0)),
        draw(_maybe(3)),
        draw(_maybe(1.7e9)),
    )
    return _decode_sql, (row,)


def _decode_sqs(message: dict[str, Any]) -> QueuedJob:
    from kinetis_queue.backends.sqs.queue import SqsHandle, decode_message

    return decode_message(message, "q", SqsHandle("http://sqs/q", "receipt"))


@st.composite
def sqs_messages(draw: st.DrawFn) -> tuple[Callable[..., QueuedJob], tuple[Any, ...]]:
    attributes: dict[str, Any] = {}
    if draw(st.booleans()):
        attributes["maxAttempts"] = draw(_maybe({"DataType": "Number", "StringValue": "3"}))
    if draw(st.booleans()):
        attributes["metadata"] = {
            "DataType": "String",
            "StringValue": draw(mutated({"trace": "x"})).decode("utf-8", "replace"),
        }
    message = {
        "Body": draw(mutated(_body())).decode("utf-8", "replace"),
        "Attributes": {"ApproximateReceiveCount": draw(_maybe("1"))},
        "MessageAttributes": attributes,
    }
    return _decode_sqs, (message,)


@dataclasses.dataclass
class _AmqpMessage:
    body: Any
    properties: dict[str, Any]


@functools.cache
def _rabbitmq() -> Any:
    """A RabbitMqQueue that never connects: only its decoder is used."""
    from kinetis_queue.backends.rabbitmq import RabbitMqQueue
    from tests.settings import RABBITMQ_URL

    return RabbitMqQueue(url=RABBITMQ_URL)


def _decode_rabbitmq(body: Any, headers: Any) -> QueuedJob:
    return _rabbitmq()._decode(None, "q", 1, _AmqpMessage(body, {"application_headers": headers}))  # type: ignore[no-any-return]


@st.composite
def amqp_deliveries(draw: st.DrawFn) -> tuple[Callable[..., QueuedJob], tuple[Any, ...]]:
    body: Any = draw(mutated(_body()))
    if draw(st.integers(0, 4)) == 0:  # py-amqp hands back text when the publisher set a content_encoding
        body = body.decode("utf-8", "replace")
    headers: Any = {
        "maxAttempts": draw(_maybe(3)),
        "metadata": draw(_maybe(draw(mutated({"trace": "x"})).decode("utf-8", "replace"))),
    }
    if draw(st.booleans()):
        headers["attempts"] = draw(_maybe(1))
    if draw(st.integers(0, 9)) == 0:
        headers = draw(odd_value)
    return _decode_rabbitmq, (body, headers)


DECODERS = {"redis": redis_members, "sql": sql_rows, "sqs": sqs_messages, "rabbitmq": amqp_deliveries}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("decoder", sorted(DECODERS))
def test_a_decoder_returns_a_job_or_reports_malformed_data(decoder: str) -> None:
    """H3: 500 examples per decoder: a valid QueuedJob or MalformedQueuedJobDataError; no other exception."""
    importlib.import_module(f"kinetis_queue.backends.{decoder}")  # imported before the clock runs
    seen = Counter[str]()
    took: list[float] = []

    @settings(settings.get_profile("kq-ci"), max_examples=500)
    @given(case=DECODERS[decoder]())
    def decodes(case: tuple[Callable[..., QueuedJob], tuple[Any, ...]]) -> None:
        decode, arguments = case
        started = time.perf_counter()
        try:
            job = decode(*arguments)
        except MalformedQueuedJobDataError:
            seen["MalformedQueuedJobDataError"] += 1
            return
        finally:
            took.append(time.perf_counter() - started)
        seen["QueuedJob"] += 1
        assert isinstance(job, QueuedJob) and type(job.args) is dict and type(job.metadata) is dict
        assert type(job.attempts) is int and job.attempts >= 1 and isinstance(job.pushed_at, datetime)
        assert job.max_attempts is None or type(job.max_attempts) is int
        assert all(math.isfinite(v) for v in _numbers(job.args) if type(v) is float)

    decodes()
    write_report(
        "H3-decoder-fuzz",
        Backend(decoder, decoder),
        examples=sum(seen.values()),
        outcomes=dict(seen),
        decode_ms_p99=round(sorted(took)[int(len(took) * 0.99)] * 1000, 2),
        decode_ms_max=round(max(took) * 1000, 2),
    )
    assert seen["QueuedJob"] and seen["MalformedQueuedJobDataError"], "the fuzz never reached one of the outcomes"


def _numbers(value: Any) -> list[Any]:
    stack, found = [value], []
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        else:
            found.append(item)
    return found


# -- H4: hostile stored fields through a real worker ---------------------------------------------------

#: Contents no push() writes, for any stored field: the worker must settle each one and go on (issue 12,
#: item 5). Text fields meet NUL, control characters, lone surrogates, over-long and near-miss class
#: paths; number fields meet wrong types and ranges; maps meet bad keys, bad strings and deep nesting.
_ECHO = "tests.hostile_jobs.Echo"
HOSTILE_VALUES: dict[str, Any] = {
    "empty": "",
    "nul": "\x00",
    "class-nul": _ECHO + "\x00",
    "class-lone-surrogate": _ECHO + "\ud800",
    "class-escape-sequence": _ECHO + "\x1b[2J",
    "class-newline": _ECHO + "\nforged line",
    "class-rtl-override": "tests.hostile_jobs.Ech\u202eo",
    "class-trailing-space": _ECHO + " ",
    "class-no-module": "Echo",
    "class-empty-part": "tests..Echo",
    "class-256-chars": "tests." + "x" * 250,
    "class-10000-chars": "tests." + "x" * 10_000,
    "class-import-exits": "tests.hostile_import.Anything",
    "class-not-a-job": "os.system",
    "class-valid": _ECHO,
    "none": None,
    "true": True,
    "zero": 0,
    "negative": -1,
    "fraction": 1.5,
    "nan": float("nan"),
    "int32-overflow": 2**31,
    "huge-int": 10**30,
    "list": [],
    "map": {},
    "map-lone-surrogate": {"label": "\ud800"},
    "map-nul": {"label": "a\x00b"},
    "map-key-nul": {"\x00": 1},
    "map-key-not-identifier": {"la bel": 1},
    "map-key-surrogate": {"\udc00": 1},
    "map-deep": {"label": nested(MAX_DEPTH + 3, "list")},
}


class _AfterYear9999(datetime):
    """Sent as an AMQP timestamp header ('T') one second past 9999-12-31, which no datetime can hold:
    py-amqp fails while reading such a header. Elsewhere it is simply not a JSON value."""

    def utctimetuple(self) -> time.struct_time:
        return time.struct_time((9999, 12, 32, 0, 0, 0, 0, 1, 0))


HOSTILE_VALUES["amqp-timestamp-past-9999"] = _AfterYear9999(2000, 1, 1)
STORED_FIELD_NAMES = ("id", "pushedAt", "class", "args", "attempts", "maxAttempts", "metadata")


@pytest.mark.timeout(300)
@pytest.mark.logs_errors("kinetis_queue.worker")  # unresolvable job classes fail for good
def test_no_stored_field_content_stops_a_worker(
    backend: Backend, connection: Queue, store: Any, queue_name: str, outcomes: list[tuple[str, dict[str, Any]]]
) -> None:
    """H4: every hostile value in every stored field, written raw in the backend's own layout, then taken by
    a real Worker: it returns normally every time, and the message is settled (removed as malformed, run,
    or failed with a record), nothing left waiting or reserved."""
    from kinetis_queue.contracts import DisposableQueue
    from kinetis_queue.models import FailedJob
    from kinetis_queue.worker import Worker

    seen = Counter[str]()
    connection.size(queue_name)  # declares the queue where a store needs it (RabbitMQ drops a publish to none)
    worker = Worker(connection, default_max_attempts=1, retry_base_delay=0)
    try:
        for field in STORED_FIELD_NAMES:
            for name, value in HOSTILE_VALUES.items():
                case = f"{field}={name}"
                if not store.inject_fields(queue_name, {field: value}):
                    seen["not storable"] += 1
                    continue
                before = len(outcomes)
                assert worker.process_next(5, [queue_name]) is True, case
                reported = [kind for kind, _ in outcomes[before:]]
                assert reported in ([], ["job_succeeded"], ["job_failed_permanently"]), (case, reported)
                if reported == ["job_failed_permanently"]:
                    assert FailedJob.objects.filter(pk=outcomes[-1][1]["failed_job_id"]).exists(), case
                seen[reported[0] if reported else "malformed"] += 1
                assert store.remaining(queue_name) == 0, case
    finally:
        worker.close()
    if isinstance(connection, DisposableQueue):
        connection.dispose()  # RabbitMQ: a delivery still unacked would now be back in the queue
    assert store.remaining(queue_name) == 0
    write_report(
        "H4-stored-field-fuzz", backend, cases=len(STORED_FIELD_NAMES) * len(HOSTILE_VALUES), outcomes=dict(seen)
    )
    assert seen["malformed"] and seen["job_succeeded"] and seen["job_failed_permanently"], seen
