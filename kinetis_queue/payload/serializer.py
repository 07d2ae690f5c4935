"""The argument contract (DESIGN.md §2): a job's ``__init__`` arguments to JSON-ready values and back.

Every backend stores the same JSON payload, so one module decides what may be pushed: a value that
would not come back equal and of the same type is rejected at push, never discovered on the worker.
No pickle: a job is rebuilt only from its stored class path and plain JSON values. A parameter
annotated with a registered value type or a model class is stored by that type's codec
(kinetis_queue.values, docs/job-arguments.md); a plain argument's path is unchanged by them.
"""

from __future__ import annotations

import enum
import inspect
import math
import re
import sys
import types
import typing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Final, Union

from kinetis_queue import values
from kinetis_queue.exceptions import JobReconstructionError, UnserializableJobError
from kinetis_queue.job import MAX_CLASS_PATH, Job, Sensitive, is_class_path, job_class_path
from kinetis_queue.payload.registry import resolve_job_class
from kinetis_queue.validation import MAX_DEPTH, is_utf8
from kinetis_queue.values import (
    Codec,
    Malformed,
    MalformedJobArgumentError,
    Missing,
    MissingModelError,
    MissingModelSkipped,
    Rejected,
    TypedCodec,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "check_plain",
    "deserialize_job",
    "serialize_job",
    "shown_parameters",
    "typed_parameters",
]

#: Most decimal digits an int may have: Python's default limit on int/str conversion, which a worker's
#: JSON decoder applies, so a longer int could never be read back (nor, by default, written).
MAX_INT_DIGITS: Final = sys.int_info.default_max_str_digits
_INT_BOUND: Final = 10**MAX_INT_DIGITS

#: RFC 3339 date-time (section 5.6), ASCII digits only; the offset is required, so the value is aware.
_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]+)?(?:[Zz]|[+-][0-9]{2}:[0-9]{2})"
)

#: How many ``Annotated``/type-alias layers are peeled off an annotation before giving up.
_MAX_UNWRAP = 16

_MISSING: Final = object()


class _Restore(enum.Enum):
    """How a parameter's stored value is turned back into its argument."""

    AS_STORED = "as stored"  # plain JSON value
    ENUM = "enum"  # the annotation names exactly one Enum class
    DATETIME = "datetime"  # the annotation names datetime.datetime
    CODEC = "codec"  # the annotation names a registered value type or a model class (kinetis_queue.values)


@dataclass(frozen=True, slots=True)
class _Param:
    """One ``__init__`` parameter as the contract sees it, computed once per class."""

    name: str
    positional_only: bool
    required: bool
    default: Any
    #: True for ``Annotated[..., Sensitive]`` and for an annotation that could not be resolved.
    sensitive: bool
    restore: _Restore
    #: The Enum class for ``_Restore.ENUM``, ``datetime`` for ``_Restore.DATETIME``, else None.
    target: type | None
    admits_none: bool
    #: How a ``_Restore.CODEC`` parameter is stored and rebuilt, else None.
    codec: Codec | None = None


@dataclass(frozen=True, slots=True)
class _Plan:
    """Everything serialization needs to know about a job class's ``__init__``."""

    params: tuple[_Param, ...]
    by_name: dict[str, _Param]
    #: Why the class can never meet the contract (``*args``/``**kwargs``, a generic ``models.Model``), or None.
    problem: str | None


#: Per-class plans: signature and type-hint inspection is far too slow to repeat on every push.
_plans: dict[type, _Plan] = {}
# A value type registered after a class's plan was built changes what its annotations restore.
values._listeners.append(_plans.clear)


class _Invalid(Exception):
    """Internal: a nested value broke the contract; ``segments`` collects its location innermost first."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.segments: list[str] = []


# --------------------------------------------------------------------------------------------------
# Per-class plan


def _plan_for(cls: type) -> _Plan:
    """The cached plan of ``cls``; raises whatever inspecting the class raises."""
    plan = _plans.get(cls)
    if plan is None:
        plan = _build_plan(cls)
        _plans[cls] = plan
    return plan


def _build_plan(cls: type) -> _Plan:
    """Inspect ``cls.__init__`` once: its parameters minus self, their annotations and defaults."""
    init = cls.__init__  # type: ignore[misc]
    if init is object.__init__:
        # A Job without its own __init__ takes no arguments (object's signature is *args, **kwargs).
        return _Plan(params=(), by_name={}, problem=None)
    parameters = list(inspect.signature(init).parameters.values())
    if parameters and parameters[0].kind in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        parameters = parameters[1:]  # self
    hints, unresolved = _resolve_hints(init)
    params: list[_Param] = []
    problem: str | None = None
    for parameter in parameters:
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            star = "*" if parameter.kind is inspect.Parameter.VAR_POSITIONAL else "**"
            problem = problem or f"__init__ takes {star}{parameter.name}, which cannot be stored"
            continue
        try:
            params.append(_describe_param(parameter, hints, unresolved))
        except values.Unusable as unusable:
            problem = problem or f"__init__ parameter {parameter.name} {unusable.reason}"
    return _Plan(params=tuple(params), by_name={p.name: p for p in params}, problem=problem)


def _resolve_hints(init: Any) -> tuple[dict[str, Any], set[str]]:
    """The resolved annotations of ``init``, and the names whose annotation could not be resolved.

    ``get_type_hints`` fails as a whole on one bad forward reference (say a name imported only under
    TYPE_CHECKING), so on failure each annotation is resolved alone and only the bad ones are lost.
    """
    try:
        return typing.get_type_hints(init, include_extras=True), set()
    except Exception:
        raw = getattr(init, "__annotations__", None) or {}
    globalns = getattr(inspect.unwrap(init), "__globals__", {})
    hints: dict[str, Any] = {}
    unresolved: set[str] = set()
    for name, annotation in raw.items():

        def shim() -> None:
            """Carrier for one annotation."""

        shim.__annotations__ = {name: annotation}
        try:
            hints.update(typing.get_type_hints(shim, globalns=globalns, include_extras=True))
        except Exception:
            unresolved.add(name)
    return hints, unresolved


def _describe_param(parameter: inspect.Parameter, hints: dict[str, Any], unresolved: set[str]) -> _Param:
    """Classify one parameter: Sensitive or not, and whether its annotation restores an Enum or datetime;
    raises values.Unusable for an annotation no push may store."""
    sensitive = parameter.name in unresolved  # cannot tell, so never reveal
    restore = _Restore.AS_STORED
    target: type | None = None
    admits_none = False
    codec: Codec | None = None
    if parameter.name in hints:
        hint, found_sensitive = _unwrap(hints[parameter.name])
        sensitive = sensitive or found_sensitive
        if typing.get_origin(hint) in (Union, types.UnionType):
            members = []
            for member in typing.get_args(hint):
                member, member_sensitive = _unwrap(member)
                sensitive = sensitive or member_sensitive
                if member is type(None):
                    admits_none = True
                else:
                    members.append(member)
            hint = members[0] if len(members) == 1 else None
        if hint is datetime:
            restore, target = _Restore.DATETIME, datetime
        elif (codec := values.codec_for(hint)) is not None:
            restore, target = _Restore.CODEC, hint
        elif isinstance(hint, type) and issubclass(hint, enum.Enum):
            restore, target = _Restore.ENUM, hint
    return _Param(
        name=parameter.name,
        positional_only=parameter.kind is inspect.Parameter.POSITIONAL_ONLY,
        required=parameter.default is inspect.Parameter.empty,
        default=parameter.default,
        sensitive=sensitive,
        restore=restore,
        target=target,
        admits_none=admits_none,
        codec=codec,
    )


def _unwrap(hint: Any) -> tuple[Any, bool]:
    """Peel ``Annotated`` and ``type X = ...`` layers off ``hint``; also report whether Sensitive was seen."""
    sensitive = False
    for _ in range(_MAX_UNWRAP):
        if typing.get_origin(hint) is Annotated:
            sensitive = sensitive or any(item is Sensitive for item in hint.__metadata__)
            hint = hint.__origin__
        elif isinstance(hint, typing.TypeAliasType):
            hint = hint.__value__
        else:
            break
    return hint, sensitive


# --------------------------------------------------------------------------------------------------
# Push side


def serialize_job(job: Job) -> tuple[str, dict[str, Any]]:
    """Return (class_path, args) where args maps each __init__ parameter name to its JSON-ready value.

    Raises UnserializableJobError, naming the class, the argument and a nested value's location but
    never the value, when any argument has no lossless JSON form. Lists and dicts are returned as
    they are, not copied: encode them before the job's attributes can change.
    """
    if not isinstance(job, Job):
        raise UnserializableJobError(f"only a Job instance can be pushed, not a {type(job).__qualname__}")
    cls = type(job)
    path = job_class_path(cls)
    if len(path) > MAX_CLASS_PATH:
        raise UnserializableJobError(
            f"{path[:60]}...: the job class path is longer than {MAX_CLASS_PATH} characters, "
            "more than any backend stores"
        )
    if not is_class_path(path):
        # A class can set its own __module__ or __qualname__; a worker must be able to read it back.
        raise UnserializableJobError(
            f"{path[:60]!r}: the job class path is not a dotted path of Python identifiers (module.QualName)"
        )
    try:
        plan = _plan_for(cls)
    except Exception as exc:
        raise UnserializableJobError(f"{path}: __init__ cannot be inspected ({type(exc).__name__})") from exc
    if plan.problem is not None:
        raise UnserializableJobError(f"{path}: {plan.problem}")
    args: dict[str, Any] = {}
    for param in plan.params:
        value = getattr(job, param.name, _MISSING)
        if value is _MISSING:
            raise UnserializableJobError(
                f"{path} argument {param.name}: the job has no same-named attribute to read it from"
            )
        args[param.name] = _serialize_arg(path, param, value)
    return path, args


def _serialize_arg(path: str, param: _Param, value: Any) -> Any:
    """The JSON-ready form of one top-level argument."""
    kind = type(value)
    if param.restore is not _Restore.AS_STORED:
        # The annotation restores an Enum member or a datetime: only that, or None if admitted,
        # comes back as what was pushed.
        if value is None and param.admits_none:
            return None
        if param.codec is not None and value is not None:
            try:
                encoded = param.codec.encode(value)
            except Rejected as rejected:
                raise _rejected(path, param, rejected.reason) from None
            if isinstance(param.codec, TypedCodec) and (reason := check_plain(encoded["data"])) is not None:
                alias = param.codec.writer.alias
                raise _rejected(path, param, f"to_data() of value type {alias!r} returned data that {reason}")
            return encoded
        if param.restore is _Restore.ENUM and kind is param.target:
            stored = value.value
            if type(stored) is int:
                return stored
            if type(stored) is not str:
                raise _rejected(path, param, "an Enum member's value must be a str or an int")
            if not is_utf8(stored):
                raise _rejected(path, param, "the Enum member's value is not valid UTF-8")
            return stored
        if param.restore is _Restore.DATETIME and kind is datetime:
            return _serialize_datetime(path, param, value)
        expected = (
            param.codec.name if param.codec is not None else param.target.__qualname__ if param.target else "value"
        )
        raise _rejected(
            path,
            param,
            f"the annotation restores a {expected}"
            + (" (or None)" if param.admits_none else "")
            + f", so a {_type_name(value)} would not come back as pushed",
        )
    if value is None or kind is bool:
        return value
    if kind is int:
        if not -_INT_BOUND < value < _INT_BOUND:
            raise _rejected(path, param, f"int has more than {MAX_INT_DIGITS} digits")
        return value
    if kind is str:
        if not is_utf8(value):
            raise _rejected(path, param, "string is not valid UTF-8")
        return value
    if kind is float:
        if not math.isfinite(value):
            raise _rejected(path, param, "float is not finite")
        return value
    if kind is list or kind is dict:
        try:
            _check_container(value, 1)
        except _Invalid as invalid:
            raise _rejected(path, param, invalid.reason, "".join(reversed(invalid.segments))) from None
        return value
    if isinstance(value, enum.Enum):
        raise _rejected(
            path,
            param,
            "an Enum member needs a parameter annotated with exactly its Enum class (or that class | None)",
        )
    if kind is datetime:
        if value.tzinfo is None or value.utcoffset() is None:
            raise _rejected(path, param, "a naive datetime is not allowed (it needs a timezone)")
        raise _rejected(
            path,
            param,
            "a datetime needs a parameter annotated with exactly datetime.datetime (or datetime | None)",
        )
    codec = values.codec_for(kind)
    if codec is not None:
        raise _rejected(
            path,
            param,
            values.explain(value)
            or f"a value of type {codec.name} needs a parameter annotated with exactly its class "
            "(or that class | None)",
        )
    raise _rejected(path, param, _describe_unsupported(value))


def _serialize_datetime(path: str, param: _Param, value: datetime) -> str:
    """RFC 3339 with microseconds; an offset that is not whole minutes is rewritten in UTC."""
    offset = value.utcoffset()
    if offset is None:
        raise _rejected(path, param, "a naive datetime is not allowed (it needs a timezone)")
    if offset % timedelta(minutes=1):
        # RFC 3339 offsets are hh:mm; the instant, which is what datetime equality compares, is kept.
        try:
            value = value.astimezone(UTC)
        except OverflowError:
            raise _rejected(path, param, "datetime cannot be written as RFC 3339") from None
    return value.isoformat(timespec="microseconds")


def _check_container(value: list[Any] | dict[Any, Any], depth: int) -> None:
    """Check a list or dict at nesting level ``depth``; raise _Invalid with the culprit's location.

    The bound also ends a cycle: a self-containing value is rejected when it passes MAX_DEPTH.
    Locations are assembled only on failure, so a valid value costs no string building.
    """
    if depth > MAX_DEPTH:
        raise _Invalid(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, list):  # callers pass exactly list or dict
        index = 0
        try:
            for index, item in enumerate(value):  # noqa: B007 - index is read in the handler
                _check_item(item, depth)
        except _Invalid as invalid:
            invalid.segments.append(f"[{index}]")
            raise
    else:
        position = 0
        try:
            for position, (key, item) in enumerate(value.items()):  # noqa: B007 - read in the handler
                if type(key) is not str:
                    raise _Invalid("map key is not a string")
                if not is_utf8(key):
                    raise _Invalid("map key is not valid UTF-8")
                _check_item(item, depth)
        except _Invalid as invalid:
            invalid.segments.append(f".{{{position}}}")
            raise


def _check_item(item: Any, depth: int) -> None:
    """Check one element held by a container at level ``depth``."""
    kind = type(item)
    if kind is str:
        if not is_utf8(item):
            raise _Invalid("string is not valid UTF-8")
    elif kind is int:
        if not -_INT_BOUND < item < _INT_BOUND:
            raise _Invalid(f"int has more than {MAX_INT_DIGITS} digits")
    elif item is None or kind is bool:
        pass
    elif kind is float:
        if not math.isfinite(item):
            raise _Invalid("float is not finite")
    elif kind is list or kind is dict:
        _check_container(item, depth + 1)
    elif isinstance(item, enum.Enum):
        raise _Invalid("an Enum member is allowed only as a top-level argument")
    elif isinstance(item, datetime):
        raise _Invalid("a datetime is allowed only as a top-level argument")
    elif (codec := values.codec_for(kind)) is not None:
        raise _Invalid(f"a value of type {codec.name} is allowed only as a top-level argument annotated with its class")
    else:
        raise _Invalid(_describe_unsupported(item))


def check_plain(value: Any) -> str | None:
    """None if ``value`` is plain JSON under the argument contract (a typed value's data), else why not."""
    try:
        _check_item(value, 1)
    except _Invalid as invalid:
        return f"is not plain JSON: {invalid.reason}" + (
            f" (at data{''.join(reversed(invalid.segments))})" if invalid.segments else ""
        )
    return None


def _describe_unsupported(value: Any) -> str:
    """What kind of value this is, in words that never include the value itself."""
    explained = values.explain(value)
    if explained is not None:
        return explained
    if isinstance(value, tuple):
        return "a tuple is not allowed"
    if isinstance(value, set | frozenset):
        return "a set is not allowed"
    if isinstance(value, bytes | bytearray | memoryview):
        return "bytes are not allowed"
    for base in (str, bool, int, float, list, dict):
        if isinstance(value, base):
            return f"a {base.__name__} subclass ({type(value).__qualname__}) is not allowed"
    return f"a {type(value).__qualname__} is not allowed"


def _type_name(value: Any) -> str:
    """The name of a value's type for an error message (never the value itself)."""
    return "None" if value is None else type(value).__qualname__


def _rejected(path: str, param: _Param, reason: str, location: str = "") -> UnserializableJobError:
    """The push-time error: class, argument and location, and for a Sensitive argument nothing more."""
    if param.sensitive:
        return UnserializableJobError(
            f"{path} argument {param.name}: the value does not meet the argument contract "
            "(details withheld: the argument is Sensitive)"
        )
    return UnserializableJobError(f"{path} argument {param.name}{location}: {reason}")


# --------------------------------------------------------------------------------------------------
# Worker side


def deserialize_job(class_path: str, args: Any) -> Job:
    """Rebuild the job; any mismatch raises JobReconstructionError (class resolved via registry.resolve_job_class).

    Schema drift between the pushing and the popping code is the job's own failure, so every way the
    stored data can disagree with the current class ends here as one error type, never with a value.
    """
    if type(class_path) is not str:
        raise JobReconstructionError("the stored job class is not a string")
    cls = resolve_job_class(class_path)
    if not isinstance(args, dict):
        raise JobReconstructionError(f"{class_path}: the stored arguments are not a map")
    try:
        plan = _plan_for(cls)
    except Exception as exc:
        raise JobReconstructionError(f"{class_path}: __init__ cannot be inspected ({type(exc).__name__})") from exc
    if plan.problem is not None:
        raise JobReconstructionError(f"{class_path}: {plan.problem}")
    for key in args:
        if key not in plan.by_name:
            shown = key if type(key) is str and key.isidentifier() and len(key) <= 100 else "(unprintable name)"
            raise JobReconstructionError(f"{class_path}: stored argument {shown} matches no __init__ parameter")
    positional: list[Any] = []
    keywords: dict[str, Any] = {}
    for param in plan.params:
        if param.name in args:
            try:
                value = _restore_arg(class_path, param, args[param.name])
            except MissingModelError as missing:
                if getattr(cls, "delete_when_missing_models", False):
                    raise MissingModelSkipped(f"{missing} (delete_when_missing_models)") from None
                raise
        elif param.required:
            raise JobReconstructionError(f"{class_path}: required argument {param.name} was not stored")
        elif param.positional_only:
            value = param.default
        else:
            continue
        if param.positional_only:
            positional.append(value)
        else:
            keywords[param.name] = value
    try:
        job = cls(*positional, **keywords)
    except Exception as exc:
        raise JobReconstructionError(f"{class_path}: __init__ raised {type(exc).__qualname__}") from exc
    if not isinstance(job, Job):
        raise JobReconstructionError(f"{class_path}: constructing the class did not return a Job")
    return job


def _restore_arg(class_path: str, param: _Param, stored: Any) -> Any:
    """The argument for ``param`` from its stored form; an Enum or datetime is rebuilt from the annotation."""
    if param.restore is _Restore.AS_STORED:
        return stored
    if stored is None:
        if param.admits_none:
            return None
        raise JobReconstructionError(
            f"{class_path}: argument {param.name} is stored as null, which its annotation does not admit"
        )
    if param.codec is not None:
        try:
            return param.codec.decode(stored)
        except Malformed as malformed:
            raise MalformedJobArgumentError(f"{class_path}: argument {param.name} {malformed.reason}") from None
        except Missing as missing:
            key = "(withheld: the argument is Sensitive)" if param.sensitive else missing.key
            raise MissingModelError(
                f"{class_path}: argument {param.name}: {missing.model} with primary key {key} no longer exists"
            ) from None
    if param.restore is _Restore.ENUM:
        enum_class = param.target
        assert enum_class is not None
        invalid = JobReconstructionError(
            f"{class_path}: argument {param.name} is not a valid {enum_class.__qualname__} member"
        )
        if type(stored) is not str and type(stored) is not int:
            raise invalid
        try:
            return enum_class(stored)
        except Exception:
            # The Enum's own error quotes the value, so it is not chained.
            raise invalid from None
    invalid = JobReconstructionError(
        f"{class_path}: argument {param.name} is not a valid RFC 3339 timestamp with an offset"
    )
    if type(stored) is not str or not _RFC3339.fullmatch(stored):
        raise invalid
    try:
        return datetime.fromisoformat(stored.upper().replace(" ", "T").replace("Z", "+00:00"))
    except ValueError:
        # An impossible date or time; the parser's message quotes the value, so it is not chained.
        raise invalid from None


# --------------------------------------------------------------------------------------------------
# What redaction needs to know (the rules themselves are in kinetis_queue.payload.redaction)


def shown_parameters(job_class: type[Job]) -> frozenset[str]:
    """The names of ``job_class``'s ``__init__`` parameters not marked ``Sensitive`` and whose annotation
    resolved; raises whatever inspecting the class raises."""
    return frozenset(param.name for param in _plan_for(job_class).params if not param.sensitive)


def typed_parameters(job_class: type[Job]) -> frozenset[str]:
    """The names of ``job_class``'s parameters stored by a codec (a typed value or a model reference)."""
    return frozenset(param.name for param in _plan_for(job_class).params if param.codec is not None)


def contract_problem(job_class: type[Job]) -> str | None:
    """Why no job of ``job_class`` can be pushed (``*args``, a generic ``models.Model``), or None; for
    ``manage.py check`` (kinetis_queue.E010), which says it before the first push does."""
    try:
        plan = _plan_for(job_class)
    except Exception as exc:
        return f"{job_class_path(job_class)}: __init__ cannot be inspected ({type(exc).__name__})"
    return None if plan.problem is None else f"{job_class_path(job_class)}: {plan.problem}"
