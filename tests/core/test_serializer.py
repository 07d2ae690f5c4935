"""The argument contract (DESIGN.md §2; spec "Job arguments"): what may be pushed, how it comes back."""

from __future__ import annotations

import enum
import json
import math
import re
import sys
import typing
from collections import OrderedDict, defaultdict
from dataclasses import InitVar, dataclass
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinetis_queue.exceptions import JobReconstructionError, UnserializableJobError
from kinetis_queue.job import Job, Sensitive, job_class_path
from kinetis_queue.payload.redaction import redacted_args
from kinetis_queue.payload.serializer import deserialize_job, serialize_job

SECRET = "s3cr3t-VALUE"
SECRET_KEY = "s3cr3t-KEY"

# --------------------------------------------------------------------------------------------------
# Job classes (module level, so their class paths resolve)


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Number(enum.Enum):
    ONE = 1
    TWO = 2


class Shade(enum.Enum):
    LIGHT = "light"


class PairEnum(enum.Enum):
    PAIR = (1, 2)


class BoolEnum(enum.Enum):
    YES = True


class SurrogateEnum(enum.Enum):
    BAD = "\ud800" + SECRET


class BaseEnum(enum.Enum):
    """A member-less Enum may be subclassed; its subclass's members are not BaseEnum's."""


class DerivedEnum(BaseEnum):
    ITEM = SECRET


class MyStr(str):
    __slots__ = ()


class MyList(list[Any]):
    pass


class MyDatetime(datetime):
    pass


class Opaque:
    def __repr__(self) -> str:
        return SECRET


class NoOffset(tzinfo):
    """A tzinfo that answers None: such a datetime is naive for the contract."""

    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return None

    def tzname(self, dt: datetime | None) -> str | None:
        return None

    def dst(self, dt: datetime | None) -> timedelta | None:
        return None


class Carrier(Job):
    def __init__(self, value: Any) -> None:
        self.value = value


@dataclass
class DataCarrier(Job):
    value: Any
    label: str = "plain"


class SecretCarrier(Job):
    def __init__(self, token: Annotated[Any, Sensitive], note: Any = None) -> None:
        self.token = token
        self.note = note


class OptionalSecret(Job):
    def __init__(self, token: Annotated[Color, Sensitive] | None = None) -> None:
        self.token = token


class EnumJob(Job):
    def __init__(
        self,
        color: Color,
        level: Level | None = None,
        number: typing.Optional[Number] = None,  # noqa: UP045 - typing.Optional is its own code path
        tagged: Annotated[Color, "doc"] | None = None,
    ) -> None:
        self.color = color
        self.level = level
        self.number = number
        self.tagged = tagged


class PairJob(Job):
    def __init__(self, value: PairEnum) -> None:
        self.value = value


class BoolEnumJob(Job):
    def __init__(self, value: BoolEnum) -> None:
        self.value = value


class SurrogateEnumJob(Job):
    def __init__(self, value: SurrogateEnum) -> None:
        self.value = value


@dataclass
class DatetimeJob(Job):
    at: datetime
    maybe: datetime | None = None


class UnannotatedJob(Job):
    def __init__(self, value) -> None:  # type: ignore[no-untyped-def]
        self.value = value


class SuperclassEnumJob(Job):
    def __init__(self, value: BaseEnum) -> None:
        self.value = value


class AnyEnumJob(Job):
    def __init__(self, value: enum.Enum) -> None:
        self.value = value


class UnionEnumJob(Job):
    def __init__(self, value: Color | Shade) -> None:
        self.value = value


class StrAnnotatedJob(Job):
    def __init__(self, value: str) -> None:
        self.value = value


class DateAnnotatedJob(Job):
    def __init__(self, value: date) -> None:
        self.value = value


class UnionDatetimeJob(Job):
    def __init__(self, value: datetime | str) -> None:
        self.value = value


class VarArgsJob(Job):
    def __init__(self, *items: int) -> None:
        self.items = items


class VarKwargsJob(Job):
    def __init__(self, first: int, **extra: int) -> None:
        self.first = first
        self.extra = extra


class Forgetful(Job):
    def __init__(self, kept: int, dropped: int) -> None:
        self.kept = kept


@dataclass
class InitVarJob(Job):
    kept: int
    passed: InitVar[int]

    def __post_init__(self, passed: int) -> None:
        self.kept += passed


class NoInit(Job):
    def handle(self) -> None:
        pass


class PositionalOnly(Job):
    def __init__(self, first: int, /, second: int = 2, third: str = "three") -> None:
        self.first = first
        self.second = second
        self.third = third


class Fussy(Job):
    def __init__(self, amount: int) -> None:
        if amount < 0:
            raise ValueError(f"amount {amount} is negative")
        self.amount = amount


class Unresolvable(Job):
    def __init__(self, hidden: MissingName, plain: int) -> None:  # type: ignore[name-defined]  # noqa: F821
        self.hidden = hidden
        self.plain = plain


class Uninspectable(Job):
    def __init__(self, token: str) -> None:
        self.token = token

    __init__.__signature__ = 42  # type: ignore[attr-defined]


class CachedPlan(Job):
    def __init__(self, one: int, two: Color | None = None) -> None:
        self.one = one
        self.two = two


class NotAJob:
    def __init__(self, value: int) -> None:
        self.value = value


# --------------------------------------------------------------------------------------------------
# Helpers


def push_error(job: Any) -> str:
    """The UnserializableJobError message serialize_job raises for ``job``."""
    with pytest.raises(UnserializableJobError) as raised:
        serialize_job(job)
    return str(raised.value)


def pop_error(class_path: str, args: Any) -> JobReconstructionError:
    with pytest.raises(JobReconstructionError) as raised:
        deserialize_job(class_path, args)
    return raised.value


def through_the_wire(job: Job) -> Job:
    """Serialize, encode as a backend would (strict JSON), decode, rebuild."""
    class_path, args = serialize_job(job)
    decoded_path, decoded_args = json.loads(json.dumps([class_path, args], allow_nan=False))
    return deserialize_job(decoded_path, decoded_args)


def assert_same(original: Any, restored: Any) -> None:
    """Equal, and of exactly the same type all the way down (dict order included)."""
    assert type(restored) is type(original)
    if type(original) is list:
        assert len(restored) == len(original)
        for left, right in zip(original, restored, strict=True):
            assert_same(left, right)
    elif type(original) is dict:
        assert list(restored) == list(original)
        for key in original:
            assert_same(original[key], restored[key])
    elif type(original) is float:
        assert restored == original
        assert math.copysign(1.0, restored) == math.copysign(1.0, original)
    else:
        assert restored == original


def nested(depth: int, kind: str, leaf: Any = "leaf") -> Any:
    value = leaf
    for _ in range(depth):
        value = [value] if kind == "list" else {"k": value}
    return value


RFC3339_MICROS = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}[+-][0-9]{2}:[0-9]{2}")

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=30,
)

# --------------------------------------------------------------------------------------------------
# Round trips


@given(json_values)
def test_json_values_round_trip_with_exact_types(value: Any) -> None:
    restored = through_the_wire(Carrier(value))
    assert type(restored) is Carrier
    assert_same(value, restored.value)


@given(json_values, st.text())
def test_dataclass_job_round_trips(value: Any, label: str) -> None:
    class_path, args = serialize_job(DataCarrier(value, label))
    assert class_path == job_class_path(DataCarrier)
    assert list(args) == ["value", "label"]
    restored = through_the_wire(DataCarrier(value, label))
    assert isinstance(restored, DataCarrier)
    assert restored == DataCarrier(value, label)
    assert_same(value, restored.value)


def test_serialize_names_every_parameter_in_order() -> None:
    class_path, args = serialize_job(PositionalOnly(1, 5, "x"))
    assert class_path == job_class_path(PositionalOnly)
    assert args == {"first": 1, "second": 5, "third": "x"}


def test_positional_only_parameters_are_restored() -> None:
    restored = through_the_wire(PositionalOnly(7, 8, "nine"))
    assert isinstance(restored, PositionalOnly)
    assert (restored.first, restored.second, restored.third) == (7, 8, "nine")
    # A stored payload that predates a defaulted parameter gets the default.
    rebuilt = deserialize_job(job_class_path(PositionalOnly), {"first": 1})
    assert isinstance(rebuilt, PositionalOnly)
    assert (rebuilt.first, rebuilt.second, rebuilt.third) == (1, 2, "three")


def test_job_without_init_has_no_arguments() -> None:
    class_path, args = serialize_job(NoInit())
    assert args == {}
    assert type(deserialize_job(class_path, {})) is NoInit


@pytest.mark.parametrize(
    ("color", "level", "number", "tagged"),
    [
        (Color.RED, Level.HIGH, Number.TWO, Color.GREEN),
        (Color.GREEN, None, None, None),
        (Color.RED, Level.LOW, None, Color.RED),
    ],
)
def test_enum_members_round_trip_at_top_level(
    color: Color, level: Level | None, number: Number | None, tagged: Color | None
) -> None:
    _, args = serialize_job(EnumJob(color, level, number, tagged))
    assert args["color"] == color.value and type(args["color"]) is str
    assert args["level"] == (None if level is None else level.value)
    assert type(args["level"]) is (type(None) if level is None else int)
    restored = through_the_wire(EnumJob(color, level, number, tagged))
    assert isinstance(restored, EnumJob)
    assert restored.color is color
    assert restored.level is level
    assert restored.number is number
    assert restored.tagged is tagged


fixed_offsets = st.builds(
    timezone,
    st.timedeltas(min_value=timedelta(hours=-23, minutes=-59), max_value=timedelta(hours=23, minutes=59)),
)


@given(st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2100, 1, 1), timezones=fixed_offsets))
def test_aware_datetime_round_trips_as_rfc3339_with_microseconds(moment: datetime) -> None:
    _, args = serialize_job(DatetimeJob(moment))
    assert RFC3339_MICROS.fullmatch(args["at"])
    restored = through_the_wire(DatetimeJob(moment))
    assert isinstance(restored, DatetimeJob)
    assert type(restored.at) is datetime
    assert restored.at == moment
    assert restored.maybe is None
    offset = moment.utcoffset()
    assert offset is not None
    if offset % timedelta(minutes=1) == timedelta(0):
        assert restored.at.utcoffset() == offset


def test_zoneinfo_datetime_round_trips() -> None:
    try:
        paris = ZoneInfo("Europe/Paris")
    except ZoneInfoNotFoundError:  # pragma: no cover - depends on the machine's tz database
        pytest.skip("no tz database")
    moment = datetime(2024, 7, 1, 12, 30, 15, 123456, tzinfo=paris)
    _, args = serialize_job(DatetimeJob(moment, moment))
    assert args["at"] == "2024-07-01T12:30:15.123456+02:00"
    restored = through_the_wire(DatetimeJob(moment, moment))
    assert isinstance(restored, DatetimeJob)
    assert restored.at == moment and type(restored.at) is datetime
    assert restored.maybe == moment


def test_stored_rfc3339_variants_are_restored() -> None:
    for text in ("2024-01-02T03:04:05Z", "2024-01-02t03:04:05.5z", "2024-01-02 03:04:05-05:30"):
        restored = deserialize_job(job_class_path(DatetimeJob), {"at": text})
        assert isinstance(restored, DatetimeJob)
        assert restored.at.utcoffset() is not None
    restored = deserialize_job(job_class_path(DatetimeJob), {"at": "2024-01-02T03:04:05Z"})
    assert isinstance(restored, DatetimeJob)
    assert restored.at == datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)


# --------------------------------------------------------------------------------------------------
# Rejections at push: every message names class and argument, never the value

TOP_LEVEL_REJECTIONS = [
    pytest.param((SECRET,), "a tuple is not allowed", id="tuple"),
    pytest.param({SECRET}, "a set is not allowed", id="set"),
    pytest.param(frozenset({SECRET}), "a set is not allowed", id="frozenset"),
    pytest.param(SECRET.encode(), "bytes are not allowed", id="bytes"),
    pytest.param(bytearray(SECRET.encode()), "bytes are not allowed", id="bytearray"),
    pytest.param(float("nan"), "float is not finite", id="nan"),
    pytest.param(float("inf"), "float is not finite", id="inf"),
    pytest.param(float("-inf"), "float is not finite", id="-inf"),
    pytest.param(SECRET + "\ud83d", "string is not valid UTF-8", id="lone-surrogate"),
    pytest.param(MyStr(SECRET), "str subclass", id="str-subclass"),
    pytest.param(MyList([SECRET]), "list subclass", id="list-subclass"),
    pytest.param(OrderedDict(k=SECRET), "dict subclass", id="ordereddict"),
    pytest.param(defaultdict(str, k=SECRET), "dict subclass", id="defaultdict"),
    pytest.param(Opaque(), "Opaque is not allowed", id="object"),
    pytest.param(date(2024, 1, 2), "date is not allowed", id="date"),
    pytest.param(datetime(2024, 1, 2, 3, 4, 5), "naive datetime", id="naive-datetime"),
    pytest.param(datetime(2024, 1, 2, tzinfo=NoOffset()), "naive datetime", id="tzinfo-without-offset"),
    pytest.param(MyDatetime(2024, 1, 2, tzinfo=UTC), "MyDatetime is not allowed", id="datetime-subclass"),
]


@pytest.mark.parametrize(("value", "reason"), TOP_LEVEL_REJECTIONS)
def test_top_level_value_without_wire_form_is_rejected(value: Any, reason: str) -> None:
    message = push_error(Carrier(value))
    assert message.startswith(f"{job_class_path(Carrier)} argument value: ")
    assert reason in message
    assert "s3cr3t" not in message
    assert "2024" not in message


NESTED_REJECTIONS = [
    pytest.param((SECRET,), "", "a tuple is not allowed", id="tuple"),
    pytest.param({SECRET}, "", "a set is not allowed", id="set"),
    pytest.param(SECRET.encode(), "", "bytes are not allowed", id="bytes"),
    pytest.param(float("nan"), "", "float is not finite", id="nan"),
    pytest.param(float("inf"), "", "float is not finite", id="inf"),
    pytest.param("\udc00" + SECRET, "", "string is not valid UTF-8", id="lone-surrogate"),
    pytest.param(MyStr(SECRET), "", "str subclass", id="str-subclass"),
    pytest.param(Opaque(), "", "Opaque is not allowed", id="object"),
    pytest.param({987654321: SECRET}, ".{0}", "map key is not a string", id="int-key"),
    pytest.param({("a",): SECRET}, ".{0}", "map key is not a string", id="tuple-key"),
    pytest.param({"ok": 1, SECRET + "\ud800": 2}, ".{1}", "map key is not valid UTF-8", id="surrogate-key"),
    pytest.param(Color.RED, "", "Enum member is allowed only as a top-level argument", id="enum"),
    pytest.param(Level.HIGH, "", "Enum member is allowed only as a top-level argument", id="intenum"),
    pytest.param(
        datetime(2024, 1, 2, tzinfo=UTC),
        "",
        "datetime is allowed only as a top-level argument",
        id="datetime",
    ),
]


@st.composite
def located(draw: st.DrawFn, bad: Any) -> tuple[Any, str]:
    """``bad`` buried in random lists and maps, with the location the error must report."""
    steps = draw(
        st.lists(
            st.tuples(st.sampled_from(["list", "dict"]), st.integers(0, 3), st.integers(0, 2)),
            min_size=1,
            max_size=6,
        )
    )
    value, location = bad, ""
    for kind, before, after in steps:
        left = draw(st.lists(scalars, min_size=before, max_size=before))
        right = draw(st.lists(scalars, min_size=after, max_size=after))
        if kind == "list":
            value = [*left, value, *right]
            location = f"[{before}]{location}"
        else:
            entries = [(f"left{i}", v) for i, v in enumerate(left)]
            entries.append((SECRET_KEY, value))
            entries += [(f"right{i}", v) for i, v in enumerate(right)]
            value = dict(entries)
            location = f".{{{before}}}{location}"
    return value, location


@pytest.mark.parametrize(("bad", "suffix", "reason"), NESTED_REJECTIONS)
@given(data=st.data())
def test_nested_value_is_rejected_at_its_location(bad: Any, suffix: str, reason: str, data: st.DataObject) -> None:
    value, location = data.draw(located(bad))
    message = push_error(Carrier(value))
    assert message.startswith(f"{job_class_path(Carrier)} argument value{location}{suffix}: ")
    assert reason in message
    assert "s3cr3t" not in message
    assert "987654321" not in message
    assert "2024" not in message


def test_location_uses_map_position_not_key() -> None:
    value = {"first": [1, 2], SECRET_KEY: [0, 1, 2, {"a": None, "b": (SECRET,)}]}
    message = push_error(Carrier(value))
    assert "argument value.{1}[3].{1}: a tuple is not allowed" in message
    assert "s3cr3t" not in message
    assert "'b'" not in message and '"b"' not in message


def test_second_argument_is_named() -> None:
    message = push_error(DataCarrier([1, 2], label=(SECRET,)))  # type: ignore[arg-type]
    assert message == f"{job_class_path(DataCarrier)} argument label: a tuple is not allowed"


def test_depth_32_is_accepted_and_33_rejected() -> None:
    for kind in ("list", "dict"):
        value = nested(32, kind)
        restored = through_the_wire(Carrier(value))
        assert isinstance(restored, Carrier)
        assert_same(value, restored.value)
        message = push_error(Carrier(nested(33, kind)))
        step = "[0]" if kind == "list" else ".{0}"
        assert message == f"{job_class_path(Carrier)} argument value{step * 32}: nested deeper than 32 levels"
    # An empty innermost container still counts as a level.
    assert "nested deeper than 32 levels" in push_error(Carrier(nested(32, "list", leaf=[])))
    serialize_job(Carrier(nested(31, "list", leaf=[])))


def test_mixed_nesting_counts_every_container() -> None:
    value: Any = SECRET
    for level in range(33):
        value = [value] if level % 2 else {SECRET_KEY: value}
    message = push_error(Carrier(value))
    assert "nested deeper than 32 levels" in message
    assert "s3cr3t" not in message


def test_cycles_are_rejected() -> None:
    looped: list[Any] = [SECRET]
    looped.append(looped)
    message = push_error(Carrier(looped))
    assert message.endswith(f"argument value{'[1]' * 32}: nested deeper than 32 levels")
    assert "s3cr3t" not in message

    mapping: dict[str, Any] = {}
    mapping[SECRET_KEY] = mapping
    message = push_error(Carrier(mapping))
    assert message.endswith(f"argument value{'.{0}' * 32}: nested deeper than 32 levels")
    assert "s3cr3t" not in message


@pytest.mark.parametrize(
    ("job", "argument"),
    [
        pytest.param(Carrier(Color.RED), "value", id="any"),
        pytest.param(UnannotatedJob(Color.RED), "value", id="unannotated"),
        pytest.param(SuperclassEnumJob(DerivedEnum.ITEM), "value", id="superclass"),
        pytest.param(AnyEnumJob(Color.RED), "value", id="enum.Enum"),
        pytest.param(UnionEnumJob(Color.RED), "value", id="union"),
        pytest.param(StrAnnotatedJob(Color.RED), "value", id="str"),  # type: ignore[arg-type]
        pytest.param(EnumJob(Color.RED, level=Number.ONE), "level", id="other-enum"),  # type: ignore[arg-type]
    ],
)
def test_enum_needs_an_annotation_naming_exactly_its_class(job: Job, argument: str) -> None:
    message = push_error(job)
    assert message.startswith(f"{job_class_path(type(job))} argument {argument}: ")
    assert "red" not in message.lower()
    assert "s3cr3t" not in message


@pytest.mark.parametrize(
    "job",
    [
        pytest.param(Carrier(datetime(2024, 1, 2, tzinfo=UTC)), id="any"),
        pytest.param(UnannotatedJob(datetime(2024, 1, 2, tzinfo=UTC)), id="unannotated"),
        pytest.param(DateAnnotatedJob(datetime(2024, 1, 2, tzinfo=UTC)), id="date"),
        pytest.param(UnionDatetimeJob(datetime(2024, 1, 2, tzinfo=UTC)), id="union"),
        pytest.param(EnumJob(datetime(2024, 1, 2, tzinfo=UTC)), id="enum-annotation"),  # type: ignore[arg-type]
    ],
)
def test_datetime_needs_an_annotation_naming_datetime(job: Job) -> None:
    message = push_error(job)
    assert message.startswith(f"{job_class_path(type(job))} argument ")
    assert "2024" not in message


def test_annotation_that_restores_rejects_other_values() -> None:
    # A plain str under an Enum annotation would come back as a member, a different type.
    message = push_error(EnumJob(SECRET))  # type: ignore[arg-type]
    assert message.startswith(f"{job_class_path(EnumJob)} argument color: ")
    assert "s3cr3t" not in message
    # None is stored only where the annotation admits it.
    assert "argument color" in push_error(EnumJob(None))  # type: ignore[arg-type]
    assert "argument at" in push_error(DatetimeJob(None))  # type: ignore[arg-type]
    message = push_error(DatetimeJob(SECRET))  # type: ignore[arg-type]
    assert "argument at" in message and "s3cr3t" not in message
    assert "argument at:" in push_error(DatetimeJob(datetime(2024, 1, 2)))


@pytest.mark.parametrize(
    ("job", "reason"),
    [
        pytest.param(PairJob(PairEnum.PAIR), "must be a str or an int", id="tuple-valued"),
        pytest.param(BoolEnumJob(BoolEnum.YES), "must be a str or an int", id="bool-valued"),
        pytest.param(SurrogateEnumJob(SurrogateEnum.BAD), "not valid UTF-8", id="surrogate-valued"),
    ],
)
def test_enum_value_must_be_str_or_int(job: Job, reason: str) -> None:
    message = push_error(job)
    assert message.startswith(f"{job_class_path(type(job))} argument value: ")
    assert reason in message
    assert "s3cr3t" not in message


def test_datetime_that_cannot_be_written_is_rejected() -> None:
    odd = timezone(-timedelta(hours=1, seconds=30))
    message = push_error(DatetimeJob(datetime.max.replace(tzinfo=odd)))
    assert message.startswith(f"{job_class_path(DatetimeJob)} argument at: ")
    assert "9999" not in message


def test_sub_minute_offset_is_written_in_utc() -> None:
    odd = timezone(timedelta(minutes=5, seconds=30))
    moment = datetime(2024, 1, 2, 3, 4, 5, tzinfo=odd)
    _, args = serialize_job(DatetimeJob(moment))
    assert args["at"] == "2024-01-02T02:58:35.000000+00:00"


def test_sensitive_argument_error_names_only_the_argument() -> None:
    value = {"ok": 1, SECRET_KEY: [0, (SECRET,)]}
    message = push_error(SecretCarrier(value))
    assert message.startswith(f"{job_class_path(SecretCarrier)} argument token")
    assert "[" not in message and "{" not in message
    assert "tuple" not in message
    assert "s3cr3t" not in message
    # The same value in a non-sensitive argument does get its location and kind.
    assert "argument note.{1}[1]: a tuple is not allowed" in push_error(SecretCarrier(1, value))


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(float("nan"), id="nan"),
        pytest.param(SECRET + "\ud800", id="surrogate"),
        pytest.param(Color.RED, id="enum"),
        pytest.param(datetime(2024, 1, 2), id="naive"),
        pytest.param(nested(40, "list", SECRET), id="deep"),
    ],
)
def test_sensitive_rejection_gives_no_type_detail(value: Any) -> None:
    message = push_error(SecretCarrier(value))
    assert "argument token" in message
    for detail in ("float", "finite", "UTF-8", "Enum", "datetime", "nested", "[0]", "s3cr3t", "2024", "red"):
        assert detail not in message


def test_sensitive_inside_optional_is_honoured() -> None:
    message = push_error(OptionalSecret(Shade.LIGHT))  # type: ignore[arg-type]
    assert "argument token" in message
    assert "Color" not in message and "Shade" not in message
    restored = through_the_wire(OptionalSecret(Color.GREEN))
    assert isinstance(restored, OptionalSecret)
    assert restored.token is Color.GREEN


def test_only_job_instances_are_serialized() -> None:
    message = push_error(NotAJob(1))
    assert "NotAJob" in message


@pytest.mark.parametrize(
    ("job", "fragment"),
    [
        pytest.param(VarArgsJob(1, 2), "*items", id="args"),
        pytest.param(VarKwargsJob(1, extra=2), "**extra", id="kwargs"),
    ],
)
def test_variadic_parameters_are_rejected(job: Job, fragment: str) -> None:
    message = push_error(job)
    assert job_class_path(type(job)) in message
    assert fragment in message


def test_parameter_without_attribute_is_rejected() -> None:
    message = push_error(Forgetful(1, 2))
    assert message.startswith(f"{job_class_path(Forgetful)} argument dropped: ")
    assert "attribute" in message
    message = push_error(InitVarJob(1, 2))
    assert message.startswith(f"{job_class_path(InitVarJob)} argument passed: ")


def test_unresolvable_annotation_only_costs_that_parameter() -> None:
    class_path, args = serialize_job(Unresolvable(SECRET, 3))
    assert args == {"hidden": SECRET, "plain": 3}
    restored = deserialize_job(class_path, args)
    assert isinstance(restored, Unresolvable)
    assert (restored.hidden, restored.plain) == (SECRET, 3)
    # Nothing says the parameter is not Sensitive, so its errors and log lines give nothing away.
    message = push_error(Unresolvable([(SECRET,)], 3))
    assert "argument hidden" in message and "[0]" not in message
    assert redacted_args(Unresolvable, args) == {"hidden": "[redacted]", "plain": 3}


def test_uninspectable_class_is_rejected_both_ways() -> None:
    assert job_class_path(Uninspectable) in push_error(Uninspectable("x"))
    pop_error(job_class_path(Uninspectable), {"token": "x"})


def test_plan_is_computed_once_per_class(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    real = typing.get_type_hints

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(typing, "get_type_hints", counting)
    for n in range(5):
        _, args = serialize_job(CachedPlan(n, Color.RED))
        assert args == {"one": n, "two": "red"}
        restored = deserialize_job(job_class_path(CachedPlan), args)
        assert isinstance(restored, CachedPlan) and restored.two is Color.RED
    assert len(calls) <= 1


# --------------------------------------------------------------------------------------------------
# Reconstruction on the worker


@pytest.mark.parametrize("args", [None, [], "value", 3, ["value", 1]])
def test_stored_args_must_be_a_map(args: Any) -> None:
    pop_error(job_class_path(Carrier), args)


def test_missing_required_argument() -> None:
    error = pop_error(job_class_path(DataCarrier), {"label": SECRET})
    assert "value" in str(error)
    assert "s3cr3t" not in str(error)
    # An optional one may be missing: the default applies.
    restored = deserialize_job(job_class_path(DataCarrier), {"value": 1})
    assert restored == DataCarrier(1)


def test_argument_matching_no_parameter() -> None:
    error = pop_error(job_class_path(Carrier), {"value": 1, "renamed": SECRET})
    assert "renamed" in str(error)
    assert "s3cr3t" not in str(error)
    error = pop_error(job_class_path(Carrier), {"value": 1, SECRET + " not a name": 2})
    assert "s3cr3t" not in str(error)


@pytest.mark.parametrize(
    ("args", "argument"),
    [
        pytest.param({"color": SECRET}, "color", id="unknown-member"),
        pytest.param({"color": ["red"]}, "color", id="list"),
        pytest.param({"color": "red", "level": 99}, "level", id="unknown-int-member"),
        pytest.param({"color": "red", "level": True}, "level", id="bool-for-intenum"),
        pytest.param({"color": "red", "level": "1"}, "level", id="str-for-intenum"),
        pytest.param({"color": None}, "color", id="null-not-admitted"),
    ],
)
def test_enum_value_that_cannot_be_restored(args: dict[str, Any], argument: str) -> None:
    error = pop_error(job_class_path(EnumJob), args)
    assert f"argument {argument}" in str(error)
    assert "s3cr3t" not in str(error)
    assert error.__cause__ is None  # the Enum's own message would quote the value


@pytest.mark.parametrize(
    "stored",
    [
        pytest.param(SECRET, id="not-a-timestamp"),
        pytest.param("2024-01-02T03:04:05", id="naive"),
        pytest.param("2024-01-02", id="date-only"),
        pytest.param("2024-02-30T03:04:05Z", id="impossible-date"),
        pytest.param("2024-01-02T25:04:05+00:00", id="impossible-time"),
        pytest.param("20240102T030405Z", id="basic-iso8601"),
        pytest.param("2024-01-02T03:04:05+0100", id="offset-without-colon"),
        pytest.param("\uff12\uff10\uff12\uff14-01-02T03:04:05Z", id="non-ascii-digits"),
        pytest.param(1704164645, id="epoch-int"),
        pytest.param(None, id="null-not-admitted"),
    ],
)
def test_datetime_value_that_cannot_be_restored(stored: Any) -> None:
    error = pop_error(job_class_path(DatetimeJob), {"at": stored})
    assert "argument at" in str(error)
    assert "s3cr3t" not in str(error) and "2024" not in str(error)


def test_throwing_init_is_chained() -> None:
    error = pop_error(job_class_path(Fussy), {"amount": -5})
    assert isinstance(error.__cause__, ValueError)
    assert "ValueError" in str(error)
    assert "-5" not in str(error)
    error = pop_error(job_class_path(Fussy), {"amount": None, "extra": 1})
    assert "extra" in str(error)


def test_plain_values_are_passed_as_stored() -> None:
    restored = deserialize_job(job_class_path(Fussy), {"amount": 4})
    assert isinstance(restored, Fussy) and restored.amount == 4
    error = pop_error(job_class_path(Fussy), {"amount": "four"})  # __init__ compares str < int
    assert isinstance(error.__cause__, TypeError)


@pytest.mark.parametrize(
    "class_path",
    [
        "tests.core.test_serializer.GoneJob",
        f"{Carrier.__module__}.NoSuchJob",
        f"{NotAJob.__module__}.NotAJob",
        "django.contrib.contenttypes.models.ContentType",
        "",
        "Carrier",
    ],
)
def test_unknown_or_non_job_class(class_path: str) -> None:
    pop_error(class_path, {})


def test_non_string_class_path() -> None:
    pop_error(None, {})  # type: ignore[arg-type]


def test_payload_cannot_import_an_arbitrary_module(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "imported"
    (tmp_path / "kq_untrusted_probe.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).touch()\nclass Evil:\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    for class_path in (
        "kq_untrusted_probe.Evil",
        "os.system",
        "subprocess.Popen",
        "kq_untrusted_probe.sub.Evil",
        "json.decoder.JSONDecoder",
    ):
        pop_error(class_path, {})
    assert set(sys.modules) - before == set()
    assert "kq_untrusted_probe" not in sys.modules
    assert not marker.exists()


# --------------------------------------------------------------------------------------------------
# Redaction for failure logs


def test_redacted_args_hides_sensitive_parameters_only() -> None:
    args = {"token": SECRET, "note": [1, 2]}
    assert redacted_args(SecretCarrier, args) == {"token": "[redacted]", "note": [1, 2]}
    assert redacted_args(OptionalSecret, {"token": "red"}) == {"token": "[redacted]"}
    assert redacted_args(Carrier, {"value": SECRET}) == {"value": SECRET}
    assert args == {"token": SECRET, "note": [1, 2]}  # the input is left alone


def test_redacted_args_without_class_redacts_everything() -> None:
    assert redacted_args(None, {"a": 1, "b": SECRET}) == {"a": "[redacted]", "b": "[redacted]"}


def test_redacted_args_when_inspection_raises_redacts_everything() -> None:
    assert redacted_args(Uninspectable, {"token": SECRET, "x": 1}) == {
        "token": "[redacted]",
        "x": "[redacted]",
    }


def test_redacted_args_redacts_arguments_matching_no_parameter() -> None:
    assert redacted_args(Carrier, {"value": 1, "old_token": SECRET}) == {
        "value": 1,
        "old_token": "[redacted]",
    }
