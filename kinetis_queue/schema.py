"""Connection option schemas: each backend declares its KINETIS_QUEUE keys once, conf.py applies them.

A backend's schema lists its options (name, default, check: the check states type and limits) and
may cap VISIBILITY_TIMEOUT or check keys that depend on each other. It lives in a module of the
backend that imports no client library, so a core-only install still validates every setting.
Every error names the offending key, e.g. ``KINETIS_QUEUE['CONNECTIONS']['x']['URL']``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kinetis_queue.exceptions import QueueConfigurationError

#: Where a value sits in the setting: ("CONNECTIONS", "x", "URL") is KINETIS_QUEUE['CONNECTIONS']['x']['URL'].
KeyPath = tuple[str, ...]
#: Raises QueueConfigurationError naming the key when the value is not acceptable.
Check = Callable[[Any, KeyPath], None]


def key(*path: str) -> str:
    """The key as the user writes it: ``KINETIS_QUEUE['CONNECTIONS']['x']['URL']``."""
    return "KINETIS_QUEUE" + "".join(f"[{p!r}]" for p in path)


def fail(path: KeyPath, problem: str) -> QueueConfigurationError:
    """The error for the value at ``path``: the key, then what is wrong with it."""
    return QueueConfigurationError(f"{key(*path)} {problem}")


def check_number(
    value: Any, path: KeyPath, *, integer: bool, low: float, high: float | None = None, low_open: bool = False
) -> Any:
    """Return ``value`` if it is an int (or, unless ``integer``, a float) within the bounds; bool is no number."""
    ok_type = type(value) is int if integer else type(value) in (int, float)
    if not ok_type or not math.isfinite(value):
        raise fail(path, f"must be {'an int' if integer else 'a number'}")
    if (value <= low if low_open else value < low) or (high is not None and value > high):
        bound = f"{'more than' if low_open else 'at least'} {low:g}" + (f" and at most {high:g}" if high else "")
        raise fail(path, f"must be {bound}")
    return value


def integer(low: int, high: int | None = None) -> Check:
    """An int from ``low`` to ``high`` (no ceiling when None)."""

    def check(value: Any, path: KeyPath) -> None:
        check_number(value, path, integer=True, low=low, high=high)

    return check


def number(low: float, high: float | None = None, *, low_open: bool = False) -> Check:
    """An int or float from ``low`` (excluded when ``low_open``) to ``high`` (no ceiling when None)."""

    def check(value: Any, path: KeyPath) -> None:
        check_number(value, path, integer=False, low=low, high=high, low_open=low_open)

    return check


def optional(inner: Check) -> Check:
    """None, or a value ``inner`` accepts."""

    def check(value: Any, path: KeyPath) -> None:
        if value is not None:
            inner(value, path)

    return check


def boolean(value: Any, path: KeyPath) -> None:
    """True or False, nothing merely truthy."""
    if type(value) is not bool:
        raise fail(path, "must be True or False")


@dataclass(frozen=True)
class Option:
    """One connection key: its name, the value used when it is absent, and its check.

    The check runs on a given value, and on the default unless the default is None (None: unset).
    """

    name: str
    default: Any = None
    check: Check | None = None


@dataclass(frozen=True)
class BackendOptions:
    """A backend's connection keys besides BACKEND and the shared ones (VISIBILITY_TIMEOUT, ...).

    ``max_visibility_timeout``: the backend's ceiling on VISIBILITY_TIMEOUT (None: none).
    ``check_entry``: rules over several keys, run after each key's own check.
    """

    options: tuple[Option, ...] = ()
    max_visibility_timeout: int | None = None
    check_entry: Callable[[Mapping[str, Any], KeyPath], None] | None = None

    @property
    def names(self) -> frozenset[str]:
        return frozenset(option.name for option in self.options)

    def resolve(self, entry: Mapping[str, Any], path: KeyPath) -> dict[str, Any]:
        """Check the entry's keys of this schema and return every option's value, defaults filled in."""
        values: dict[str, Any] = {}
        for option in self.options:
            value = entry.get(option.name, option.default)
            if option.check is not None and (option.name in entry or option.default is not None):
                option.check(value, (*path, option.name))
            values[option.name] = value
        if self.check_entry is not None:
            self.check_entry(entry, path)
        return values


@dataclass(frozen=True)
class BuiltinBackend:
    """How a backend shipped in kinetis_queue/backends/ declares itself, in its own package (``BACKEND`` in
    its options module, which imports no client library): no table of backends elsewhere to keep in step.

    ``name``: the value of a connection's BACKEND. ``queue_class``: the dotted path of its Queue class.
    ``client``: the library that must be importable (None: none); ``extra``: the pip extra that brings it.
    """

    name: str
    queue_class: str
    options: BackendOptions
    client: str | None = None
    extra: str | None = None
