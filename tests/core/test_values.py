"""Typed values as job arguments (issue 19, spec "Selected typed data inside a job"): the registry,
Decimal and UUID built in, and what the worker does with an alias or version it does not know."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Annotated, Any

import pytest

from kinetis_queue import Job, Sensitive, register_value, values
from kinetis_queue.exceptions import JobReconstructionError, MalformedQueuedJobDataError, UnserializableJobError
from kinetis_queue.job import job_class_path
from kinetis_queue.payload.redaction import REDACTED, display_args, sensitive_values
from kinetis_queue.payload.serializer import deserialize_job, serialize_job
from kinetis_queue.values import MalformedJobArgumentError, ValueRegistrationError, registered_values


@dataclass(frozen=True)
class Money:
    amount: Decimal
    currency: str


def money_data(value: Money) -> dict[str, str]:
    return {"amount": str(value.amount), "currency": value.currency}


def money_value(data: Any) -> Money:
    return Money(Decimal(data["amount"]), data["currency"])


class Priced(Job):
    def __init__(
        self, price: Decimal, ident: uuid.UUID | None = None, total: Money | None = None, note: str = ""
    ) -> None:
        self.price = price
        self.ident = ident
        self.total = total
        self.note = note


class Secret(Job):
    def __init__(self, total: Annotated[Money, Sensitive], plain: Money | None = None) -> None:
        self.total = total
        self.plain = plain


class Loose(Job):
    def __init__(self, value: Any) -> None:
        self.value = value


@pytest.fixture
def registry() -> Iterator[None]:
    """Registers Money as "tests.money" version 1; afterwards the registry is as it was."""
    types, writers = dict(values._types), dict(values._writers)
    register_value("tests.money", 1, Money, money_data, money_value)
    yield
    values._types.clear()
    values._types.update(types)
    values._writers.clear()
    values._writers.update(writers)
    values._changed()


def push_error(job: Job) -> str:
    with pytest.raises(UnserializableJobError) as raised:
        serialize_job(job)
    return str(raised.value)


def pop_error(job: Job, **changed: Any) -> MalformedJobArgumentError:
    path, args = serialize_job(job)
    with pytest.raises(MalformedJobArgumentError) as raised:
        deserialize_job(path, {**args, **changed})
    return raised.value


def test_decimal_and_uuid_are_stored_as_typed_values_and_come_back_equal_and_of_their_type() -> None:
    ident = uuid.uuid4()
    path, args = serialize_job(Priced(Decimal("-0.10"), ident))
    assert args["price"] == {"type": "decimal", "version": 1, "data": "-0.10"}
    assert args["ident"] == {"type": "uuid", "version": 1, "data": str(ident)}
    restored = deserialize_job(path, args)
    assert isinstance(restored, Priced)
    assert type(restored.price) is Decimal and str(restored.price) == "-0.10"  # the exponent too
    assert type(restored.ident) is uuid.UUID and restored.ident == ident


def test_none_is_stored_as_null_where_the_annotation_admits_it() -> None:
    path, args = serialize_job(Priced(Decimal(1)))
    assert args["ident"] is None
    assert deserialize_job(path, args).ident is None  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "sNaN"])
def test_a_decimal_that_is_not_finite_is_refused_at_push(value: str) -> None:
    assert push_error(Priced(Decimal(value))) == (
        f"{job_class_path(Priced)} argument price: a Decimal must be finite (not NaN or an infinity)"
    )


def test_a_value_of_another_type_is_refused_where_the_annotation_stores_a_typed_value() -> None:
    assert push_error(Priced(1.5)) == (  # type: ignore[arg-type]
        f"{job_class_path(Priced)} argument price: the annotation stores a Decimal, so a float is not allowed"
    )
    assert "a str is not allowed" in push_error(Priced(Decimal(1), str(uuid.uuid4())))  # type: ignore[arg-type]


def test_a_typed_value_needs_its_annotation_and_is_never_nested() -> None:
    assert push_error(Loose(Decimal(1))) == (
        f"{job_class_path(Loose)} argument value: a value of type Decimal needs a parameter annotated with "
        "exactly its class (or that class | None)"
    )
    assert push_error(Loose({"a": [uuid.uuid4()]})) == (
        f"{job_class_path(Loose)} argument value.{{0}}[0]: a value of type UUID is allowed only as a top-level "
        "argument annotated with its class"
    )


def test_a_registered_value_type_round_trips(registry: None) -> None:
    path, args = serialize_job(Priced(Decimal(1), total=Money(Decimal("12.50"), "EUR")))
    assert args["total"] == {"type": "tests.money", "version": 1, "data": {"amount": "12.50", "currency": "EUR"}}
    restored = deserialize_job(path, args)
    assert restored.total == Money(Decimal("12.50"), "EUR")  # type: ignore[attr-defined]


def test_a_value_type_registered_after_the_first_push_takes_effect() -> None:
    """The per-class plan is cached; a registration drops it, so the annotation now restores Money."""
    assert "a Money is not allowed" in push_error(Priced(Decimal(1), total=Money(Decimal(1), "EUR")))
    types, writers = dict(values._types), dict(values._writers)
    try:
        register_value("tests.money", 1, Money, money_data, money_value)
        _, args = serialize_job(Priced(Decimal(1), total=Money(Decimal(1), "EUR")))
        assert args["total"]["type"] == "tests.money"
    finally:
        values._types.clear()
        values._types.update(types)
        values._writers.clear()
        values._writers.update(writers)
        values._changed()


def test_an_unregistered_alias_is_malformed_and_names_it(registry: None) -> None:
    job = Priced(Decimal(1), total=Money(Decimal(1), "EUR"))
    error = pop_error(job, total={"type": "tests.cost", "version": 1, "data": {}})
    assert str(error) == (
        f"{job_class_path(Priced)}: argument total names value type 'tests.cost', which this process has not registered"
    )
    # Both a reconstruction error (the job's own failure, recorded) and malformed data.
    assert isinstance(error, JobReconstructionError) and isinstance(error, MalformedQueuedJobDataError)


def test_an_unregistered_version_is_malformed_and_names_the_known_ones(registry: None) -> None:
    error = pop_error(Priced(Decimal(1)), total={"type": "tests.money", "version": 2, "data": {}})
    assert str(error) == (
        f"{job_class_path(Priced)}: argument total names value type 'tests.money' version 2, but this process "
        "registers only version(s) 1"
    )


@pytest.mark.parametrize(
    ("stored", "reason"),
    [
        ("12.50", "is not a typed value (an object of exactly type, version and data)"),
        ({"type": "tests.money", "version": 1}, "is not a typed value (an object of exactly type, version and data)"),
        ({"type": "Tests.Money", "version": 1, "data": {}}, "names a value type that is not a valid alias"),
        ({"type": "tests.money", "version": "1", "data": {}}, "names value type 'tests.money' with a version that"),
        ({"type": "decimal", "version": 1, "data": "1"}, "names value type 'decimal', which is not a Money"),
        ({"type": "tests.money", "version": 1, "data": {"amount": "x"}}, "from_data() of value type 'tests.money'"),
    ],
)
def test_a_stored_typed_value_out_of_shape_is_malformed(registry: None, stored: Any, reason: str) -> None:
    assert reason in str(pop_error(Priced(Decimal(1)), total=stored))


def test_a_callback_error_is_replaced_by_a_safe_message_without_its_cause(registry: None) -> None:
    """Spec: exceptions from to_data()/from_data() are replaced with generic safe messages and no cause."""

    def leaky(data: Any) -> Money:
        raise ValueError(f"bad amount {data['amount']}")

    register_value("tests.money", 1, Money, money_data, leaky)
    error = pop_error(Priced(Decimal(1), total=Money(Decimal("31337.5"), "EUR")))
    assert str(error).endswith("argument total from_data() of value type 'tests.money' version 1 raised")
    assert error.__cause__ is None and error.__suppress_context__

    register_value("tests.money", 1, Money, lambda value: 1 / 0, money_value)
    with pytest.raises(UnserializableJobError) as raised:
        serialize_job(Priced(Decimal(1), total=Money(Decimal("31337.5"), "EUR")))
    assert str(raised.value).endswith("argument total: to_data() of value type 'tests.money' raised")
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_from_data_must_return_the_registered_class(registry: None) -> None:
    register_value("tests.money", 1, Money, money_data, lambda data: data)
    assert "did not return a Money" in str(pop_error(Priced(Decimal(1), total=Money(Decimal(1), "EUR"))))


def test_to_data_must_return_plain_json(registry: None) -> None:
    register_value("tests.money", 1, Money, lambda value: {"amount": value.amount}, money_value)
    assert push_error(Priced(Decimal(1), total=Money(Decimal(1), "EUR"))).endswith(
        "argument total: to_data() of value type 'tests.money' returned data that is not plain JSON: a value of type "
        "Decimal is allowed only as a top-level argument annotated with its class (at data.{0})"
    )


def test_an_older_version_stays_decodable_and_pushes_use_the_newest(registry: None) -> None:
    register_value("tests.money", 2, Money, lambda v: [str(v.amount), v.currency], lambda d: Money(Decimal(d[0]), d[1]))
    path, args = serialize_job(Priced(Decimal(1), total=Money(Decimal(3), "EUR")))
    assert args["total"] == {"type": "tests.money", "version": 2, "data": ["3", "EUR"]}
    assert deserialize_job(path, args).total == Money(Decimal(3), "EUR")  # type: ignore[attr-defined]
    old = {"type": "tests.money", "version": 1, "data": {"amount": "4", "currency": "USD"}}
    assert deserialize_job(path, {**args, "total": old}).total == Money(Decimal(4), "USD")  # type: ignore[attr-defined]
    assert ("tests.money", 1, Money) in registered_values() and ("tests.money", 2, Money) in registered_values()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (("Money", 1, Money), "value alias 'Money' is invalid"),
        (("tests.money", 0, Money), "'tests.money': the version must be an int from 1 to"),
        (("tests.money", True, Money), "'tests.money': the version must be an int from 1 to"),
        (("tests.money", 1, "Money"), "'tests.money': cls must be a class"),
        (("tests.int", 1, int), "'tests.int': int is already a plain JSON argument"),
        (("decimal", 1, Money), "value 'decimal' version 1 is already registered for decimal.Decimal, not "),
        (("tests.other", 1, Decimal), "decimal.Decimal is already registered as 'decimal'; a class has one alias"),
    ],
)
def test_a_bad_registration_is_refused_naming_what_is_wrong(call: tuple[Any, ...], message: str) -> None:
    before = registered_values()
    with pytest.raises(ValueRegistrationError) as raised:
        register_value(*call, money_data, money_value)
    assert message in str(raised.value)
    assert registered_values() == before


def test_a_sensitive_typed_value_is_redacted_and_only_its_data_is_scrubbed(registry: None) -> None:
    job = Secret(Money(Decimal("31337.25"), "EURO"), Money(Decimal("1.5"), "GBP"))
    path, args = serialize_job(job)
    shown = display_args(path, args)
    assert shown["total"] == REDACTED
    assert shown["plain"] == args["plain"]  # a typed value that is not Sensitive is shown as stored
    assert sensitive_values(path, args) == ["31337.25", "EURO"]  # not the alias "tests.money"
    # A push-time error about a Sensitive typed value says nothing of it.
    register_value("tests.money", 1, Money, lambda value: 1 / 0, money_value)
    assert push_error(job) == (
        f"{path} argument total: the value does not meet the argument contract "
        "(details withheld: the argument is Sensitive)"
    )
