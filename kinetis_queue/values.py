"""Typed values as job arguments: the registry of value types (``register_value``) and its codecs.

A parameter annotated with a registered class (``Decimal`` and ``UUID`` are built in) is stored as the
typed envelope ``{"type": alias, "version": n, "data": ...}`` and rebuilt on the worker by the
``from_data`` registered for that alias and version only: a payload never names code to run or import,
and an alias or version the worker does not know is malformed data (docs/job-arguments.md). Model
instances plug in through the same codec interface (kinetis_queue.payload.model_args, installed by the app).
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from enum import Enum
from typing import Any, Final, Protocol

from kinetis_queue.exceptions import (
    JobReconstructionError,
    KinetisQueueError,
    MalformedQueuedJobDataError,
    UnknownLockDatabaseError,
)
from kinetis_queue.outcomes import WillNeverRun

__all__ = [
    "MalformedJobArgumentError",
    "MissingModelError",
    "ValueRegistrationError",
    "register_value",
    "registered_values",
]

#: A value type's alias: lowercase, stable, what the payload names (``money``, ``shop.price``).
ALIAS: Final = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
#: Highest version a value type may be registered under (a 32-bit signed column's range).
MAX_VERSION: Final = 2**31 - 1
#: The keys of a stored typed value, exactly.
TYPED_KEYS: Final = frozenset(("type", "version", "data"))


class ValueRegistrationError(KinetisQueueError, ValueError):
    """``register_value()`` was called with an alias, version, class or callback that cannot be used."""


class MalformedJobArgumentError(JobReconstructionError, MalformedQueuedJobDataError):
    """A stored typed value or model reference does not decode (unknown alias or version, bad shape, a
    model that is not installed); the job fails at once, without retries, and is recorded."""


class MissingModelError(JobReconstructionError):
    """A model instance a job was pushed with no longer exists; the job fails at once (or, with
    ``Job.delete_when_missing_models``, is acked without running)."""


class MissingModelSkipped(WillNeverRun):
    """A job with ``delete_when_missing_models`` whose model row is gone: acked unrun, its unique key freed."""


#: The job's own failures no retry can change: the settlement fails them at once (and records them).
PERMANENT_ERRORS: Final = (MalformedJobArgumentError, MissingModelError, UnknownLockDatabaseError)


class Rejected(Exception):
    """Internal: a value cannot be stored for this parameter; ``reason`` never holds the value."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Unusable(Exception):
    """Internal: an annotation no codec may store (the generic ``models.Model``); ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Malformed(Exception):
    """Internal: a stored value does not decode; ``reason`` never holds the value."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Missing(Exception):
    """Internal: a model reference names a row that is gone; ``model`` and ``key`` say which."""

    def __init__(self, model: str, key: str) -> None:
        super().__init__(model)
        self.model = model
        self.key = key


class Codec(Protocol):
    """How the argument contract stores and rebuilds a parameter annotated with one class."""

    #: What the annotation names, for messages (``Decimal``, ``auth.User``).
    name: str

    def encode(self, value: Any) -> Any:
        """The JSON-ready form of ``value``; raises Rejected. Called only for a value that is not None."""
        ...

    def decode(self, stored: Any) -> Any:
        """The value stored as ``stored``; raises Malformed or Missing. Never called with None."""
        ...


@dataclass(frozen=True, slots=True)
class ValueType:
    """One registration: ``cls`` is stored as ``{"type": alias, "version": version, "data": to_data(value)}``."""

    alias: str
    version: int
    cls: type
    to_data: Callable[[Any], Any]
    from_data: Callable[[Any], Any]
    #: Built-in types only: why a value cannot be stored (a NaN Decimal), said before to_data() runs.
    refuse: Callable[[Any], str | None] | None = None


#: Every registration by (alias, version); several versions of one alias may be decoded.
_types: dict[tuple[str, int], ValueType] = {}
#: Per class, the registration it is written as: its highest version.
_writers: dict[type, ValueType] = {}
#: Families of classes claimed by another codec (model classes): a predicate and the codec factory.
_families: list[tuple[Callable[[type], bool], Callable[[type], Codec]]] = []
#: Hints for a push-time error about a value no codec takes (a QuerySet): a sentence or None.
_explainers: list[Callable[[Any], str | None]] = []
#: Called after every change (the serializer drops its cached per-class plans).
_listeners: list[Callable[[], None]] = []
_lock = threading.Lock()


def _changed() -> None:
    for listener in _listeners:
        listener()


def register_value(
    alias: str, version: int, cls: type, to_data: Callable[[Any], Any], from_data: Callable[[Any], Any]
) -> None:
    """Let job arguments annotated ``cls`` (or ``cls | None``) carry instances of exactly ``cls``.

    ``to_data(value)`` returns plain JSON (the argument contract's values: no typed value inside);
    ``from_data(data)`` rebuilds the instance on the worker. Register in the sender and the worker
    alike, at import time (the module that defines ``cls``, or ``AppConfig.ready()``). Registering an
    older version of an alias keeps stored payloads of that version decodable; new pushes use the
    highest version registered for the class. Registering the same alias and version again for the
    same class replaces the callbacks (a re-imported module).
    """
    if type(alias) is not str or ALIAS.fullmatch(alias) is None:
        raise ValueRegistrationError(
            f"value alias {str(alias)[:70]!r} is invalid: use 1 to 64 lowercase letters, digits, '_', '.' or '-', "
            "starting with a letter"
        )
    if type(version) is not int or not 1 <= version <= MAX_VERSION:
        raise ValueRegistrationError(f"value {alias!r}: the version must be an int from 1 to {MAX_VERSION}")
    if not isinstance(cls, type):
        raise ValueRegistrationError(f"value {alias!r}: cls must be a class")
    if not callable(to_data) or not callable(from_data):
        raise ValueRegistrationError(f"value {alias!r}: to_data and from_data must be callables")
    if cls is type(None) or cls in (bool, int, float, str, list, dict):
        raise ValueRegistrationError(f"value {alias!r}: {cls.__name__} is already a plain JSON argument")
    if issubclass(cls, datetime | Enum):
        raise ValueRegistrationError(f"value {alias!r}: {cls.__name__} is already an argument type (by annotation)")
    _add(ValueType(alias, version, cls, to_data, from_data))


def _add(entry: ValueType) -> None:
    alias, version, cls = entry.alias, entry.version, entry.cls
    with _lock:
        held = _types.get((alias, version))
        if held is not None and _path(held.cls) != _path(cls):
            raise ValueRegistrationError(
                f"value {alias!r} version {version} is already registered for {_path(held.cls)}, not {_path(cls)}"
            )
        for other in _types.values():
            if other.alias != alias and _path(other.cls) == _path(cls):
                raise ValueRegistrationError(
                    f"value {alias!r}: {_path(cls)} is already registered as {other.alias!r}; a class has one alias"
                )
        _types[(alias, version)] = entry
        if held is not None and held.cls is not cls:
            _writers.pop(held.cls, None)
        writer = _writers.get(cls)
        if writer is None or writer.version <= version:
            _writers[cls] = entry
    _changed()


def registered_values() -> list[tuple[str, int, type]]:
    """Every registration as (alias, version, class), sorted: what this process can decode."""
    return sorted(((t.alias, t.version, t.cls) for t in _types.values()), key=lambda item: (item[0], item[1]))


def _path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def register_family(claims: Callable[[type], bool], codec: Callable[[type], Codec]) -> None:
    """Let ``codec(cls)`` store parameters annotated with any class ``claims`` (kinetis_queue.payload.model_args)."""
    with _lock:
        _families.append((claims, codec))
    _changed()


def register_explainer(explain: Callable[[Any], str | None]) -> None:
    """Add a hint for push-time errors about values no codec takes (a QuerySet, an unannotated Model)."""
    _explainers.append(explain)


def explain(value: Any) -> str | None:
    """Why ``value`` cannot be stored, in words without the value, if a registered hint knows."""
    for explainer in _explainers:
        try:
            reason = explainer(value)
        except Exception:  # noqa: S112 - a hint that fails gives no hint; the generic message stands
            continue
        if reason is not None:
            return reason
    return None


def codec_for(hint: Any) -> Codec | None:
    """The codec of parameters annotated exactly ``hint``, or None (the argument is plain JSON); raises
    Unusable for an annotation a codec claims but refuses (the job class can then never be pushed)."""
    if not isinstance(hint, type):
        return None
    writer = _writers.get(hint)
    if writer is not None:
        return TypedCodec(writer)
    for claims, codec in _families:
        if claims(hint):
            return codec(hint)
    return None


class TypedCodec:
    """A registered value type: its typed envelope out, only its registered alias and versions in."""

    __slots__ = ("name", "writer")

    def __init__(self, writer: ValueType) -> None:
        self.writer = writer
        self.name = writer.cls.__qualname__

    def encode(self, value: Any) -> Any:
        writer = self.writer
        if type(value) is not writer.cls:
            raise Rejected(f"the annotation stores a {self.name}, so a {type(value).__qualname__} is not allowed")
        if writer.refuse is not None and (reason := writer.refuse(value)) is not None:
            raise Rejected(reason)
        try:
            data = writer.to_data(value)
        except Exception:
            # Contract (typed payloads): a callback's exception is replaced by a generic safe message.
            raise Rejected(f"to_data() of value type {writer.alias!r} raised") from None
        # The serializer checks that ``data`` is plain JSON (its rules live there, above this module).
        return {"type": writer.alias, "version": writer.version, "data": data}

    def decode(self, stored: Any) -> Any:
        if type(stored) is not dict or stored.keys() != TYPED_KEYS:
            raise Malformed("is not a typed value (an object of exactly type, version and data)")
        alias, version = stored["type"], stored["version"]
        if type(alias) is not str or ALIAS.fullmatch(alias) is None:
            raise Malformed("names a value type that is not a valid alias")
        if type(version) is not int:
            raise Malformed(f"names value type {alias!r} with a version that is not an int")
        entry = _types.get((alias, version))
        if entry is None:
            known = sorted(v for (a, v) in _types if a == alias)
            if not known:
                raise Malformed(f"names value type {alias!r}, which this process has not registered")
            raise Malformed(
                f"names value type {alias!r} version {version}, but this process registers only version(s) "
                + ", ".join(map(str, known))
            )
        if entry.cls is not self.writer.cls:
            raise Malformed(f"names value type {alias!r}, which is not a {self.name}")
        try:
            value = entry.from_data(stored["data"])
        except Exception:
            raise Malformed(f"from_data() of value type {alias!r} version {version} raised") from None
        if type(value) is not entry.cls:
            raise Malformed(f"from_data() of value type {alias!r} version {version} did not return a {self.name}")
        return value


# -- built in ---------------------------------------------------------------------------------------


def _decimal_refused(value: Decimal) -> str | None:
    # NaN never compares equal, so it would not come back as pushed; nor may infinities (JSON has none).
    return None if value.is_finite() else "a Decimal must be finite (not NaN or an infinity)"


def _decimal_value(data: Any) -> Decimal:
    if type(data) is not str or len(data) > 1000:
        raise ValueError("not a decimal string")
    value = Decimal(data)
    if not value.is_finite():
        raise ValueError("not finite")
    return value


def _uuid_value(data: Any) -> uuid.UUID:
    if type(data) is not str or len(data) != 36:
        raise ValueError("not a canonical UUID string")
    return uuid.UUID(data)


_add(ValueType("decimal", 1, Decimal, str, _decimal_value, _decimal_refused))
_add(ValueType("uuid", 1, uuid.UUID, str, _uuid_value))
