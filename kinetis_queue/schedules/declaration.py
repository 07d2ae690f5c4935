"""Schedules as declared: KINETIS_QUEUE["SCHEDULE"] entries and the ``@schedule`` decorator, validated.

A schedule names a job class, its arguments, where to push it (connection, queue) and when: either
``CRON`` (a cron expression read in ``TIMEZONE``, parsed by the optional ``cronsim`` library) or
``EVERY`` (whole seconds, ticks aligned on the Unix epoch so every host agrees on them). Validation
never imports a module: the job class must already be registered by discovery (an app's ``jobs``
module or KINETIS_QUEUE["IMPORTS"]), the same rule a worker applies to a payload. Every error names
the schedule and the key; none shows an argument's value.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.conf import settings

from kinetis_queue import conf
from kinetis_queue.exceptions import QueueConfigurationError, UnserializableJobError
from kinetis_queue.job import Job, job_class_path
from kinetis_queue.payload import registry
from kinetis_queue.payload.serializer import serialize_job
from kinetis_queue.validation import QUEUE_NAME

#: The setting's key inside KINETIS_QUEUE.
SETTING: Final = "SCHEDULE"
#: A schedule name: it is part of Redis keys, job ids' inputs and a database column.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")
CATCH_UP_POLICIES: Final = ("skip", "latest", "all")
#: CATCH_UP="all" fires at most this many missed ticks after a downtime unless CATCH_UP_LIMIT says otherwise.
DEFAULT_CATCH_UP_LIMIT: Final = 100
#: The most missed ticks CATCH_UP_LIMIT may ask for.
MAX_CATCH_UP_LIMIT: Final = 10_000
#: The longest EVERY, in seconds (a year); longer periods are a cron expression's job.
MAX_EVERY: Final = 366 * 86_400
KEYS: Final = (
    "CRON",
    "EVERY",
    "JOB",
    "ARGS",
    "QUEUE",
    "CONNECTION",
    "TIMEZONE",
    "CATCH_UP",
    "CATCH_UP_LIMIT",
)


class ScheduleConfigurationError(QueueConfigurationError):
    """A schedule that cannot be used; the message names the schedule and the key."""


@dataclass(frozen=True)
class Schedule:
    """One validated schedule."""

    name: str
    job_class: type[Job]
    args: Mapping[str, Any]
    queue: str
    #: The connection name as resolved (the default connection's name when the entry gave none).
    connection: str
    timezone: ZoneInfo
    catch_up: str = "skip"
    catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT
    cron: str | None = None
    every: int | None = None
    #: Where it was declared: "settings" or "decorator" (for messages).
    source: str = field(default="settings", compare=False)

    @property
    def job_path(self) -> str:
        return job_class_path(self.job_class)

    @property
    def when(self) -> str:
        """The rule as written: the cron expression, or ``every Ns``."""
        return self.cron if self.cron is not None else f"every {self.every}s"

    def build_job(self) -> Job:
        """A fresh job instance with the schedule's arguments."""
        return self.job_class(**self.args)


#: Schedules declared with @schedule, by name: (the class, the keyword arguments as given).
_declared: dict[str, tuple[type[Job], dict[str, Any]]] = {}
#: Names declared twice by the decorator: reported by the check (never silently replaced).
_redeclared: set[str] = set()

J = TypeVar("J", bound=type[Job])


def schedule(
    name: str,
    *,
    cron: str | None = None,
    every: int | None = None,
    args: Mapping[str, Any] | None = None,
    queue: str = "default",
    connection: str | None = None,
    timezone: str = "UTC",
    catch_up: str = "skip",
    catch_up_limit: int = DEFAULT_CATCH_UP_LIMIT,
) -> Callable[[J], J]:
    """Declare a schedule on a Job class: the same keys as a KINETIS_QUEUE["SCHEDULE"] entry, lowercase.

    The declaration is recorded when the class statement runs (so in a module discovery imports) and
    validated by ``manage.py check`` and when a scheduler starts, not here.
    """

    def decorate(cls: J) -> J:
        entry: dict[str, Any] = {
            "JOB": cls,
            "ARGS": dict(args or {}),
            "QUEUE": queue,
            "TIMEZONE": timezone,
            "CATCH_UP": catch_up,
            "CATCH_UP_LIMIT": catch_up_limit,
        }
        if cron is not None:
            entry["CRON"] = cron
        if every is not None:
            entry["EVERY"] = every
        if connection is not None:
            entry["CONNECTION"] = connection
        known = _declared.get(name)
        if known is not None and known[0] is not cls:
            _redeclared.add(name)
        _declared[name] = (cls, entry)
        return cls

    return decorate


def cron_available() -> bool:
    """Whether the optional cron library is installed (``pip install 'kinetis-queue[schedules]'``)."""
    return importlib.util.find_spec("cronsim") is not None


def _where(name: str, source: str, key: str) -> str:
    if source == "settings":
        return f"KINETIS_QUEUE[{SETTING!r}][{name!r}][{key!r}]"
    return f"schedule {name!r} (@schedule) {key.lower()}"


def _entry(name: str, entry: Any, source: str, connections: Mapping[str, Any], default_connection: str) -> Schedule:
    def fail(key: str, problem: str) -> ScheduleConfigurationError:
        return ScheduleConfigurationError(f"{_where(name, source, key)} {problem}")

    if not isinstance(entry, Mapping):
        raise ScheduleConfigurationError(f"KINETIS_QUEUE[{SETTING!r}][{name!r}] must be a dict")
    for given in entry:
        if given not in KEYS:
            raise fail(str(given), f"is not a schedule key (known: {', '.join(KEYS)})")
    cron, every = entry.get("CRON"), entry.get("EVERY")
    if (cron is None) == (every is None):
        raise fail("CRON", "or EVERY must be given, and not both")
    timezone_name = entry.get("TIMEZONE", "UTC")
    if type(timezone_name) is not str:
        raise fail("TIMEZONE", "must be an IANA time zone name, such as 'Europe/Paris'")
    try:
        timezone = ZoneInfo(timezone_name)
    except (ZoneInfoNotFoundError, ValueError):
        raise fail("TIMEZONE", f"names no known time zone: {timezone_name!r}") from None
    if cron is not None:
        if type(cron) is not str:
            raise fail("CRON", "must be a cron expression string, such as '0 3 * * *'")
        if not cron_available():
            raise fail("CRON", "needs the cronsim library: pip install 'kinetis-queue[schedules]' (or use EVERY)")
        from cronsim import CronSim, CronSimError

        try:
            CronSim(cron, datetime(2000, 1, 1, tzinfo=timezone))
        except CronSimError as exc:
            raise fail("CRON", f"is not a valid cron expression ({exc})") from None
    if every is not None and (type(every) is not int or not 1 <= every <= MAX_EVERY):
        raise fail("EVERY", f"must be an int number of seconds from 1 to {MAX_EVERY}")
    job = entry.get("JOB")
    if isinstance(job, type) and issubclass(job, Job):
        job_class: type[Job] = job
    elif type(job) is str:
        found = Job._registry.get(job)
        if found is None:
            raise fail(
                "JOB",
                f"names {job!r}, which this process does not know ({registry.why_unresolved(job, 'job class')}): "
                "define it in an app's jobs module or a module listed in KINETIS_QUEUE['IMPORTS']",
            )
        job_class = found
    else:
        raise fail("JOB", "must be the dotted path of a Job class")
    path = job_class_path(job_class)
    problem = registry.runnable_problem(job_class, discovery=False)  # said next, in the schedule's words
    if problem is not None:
        raise fail("JOB", f"cannot be run by a worker: {problem}")
    if not registry.discoverable(job_class.__module__):
        raise fail(
            "JOB",
            f"names {path!r}, whose module a worker does not import: move it to an app's jobs module "
            "or list its module in KINETIS_QUEUE['IMPORTS']",
        )
    args = entry.get("ARGS", {})
    if args is None:
        args = {}
    if not isinstance(args, Mapping) or not all(type(k) is str for k in args):
        raise fail("ARGS", "must be a dict of keyword arguments for the job class")
    queue = entry.get("QUEUE", "default")
    if type(queue) is not str or QUEUE_NAME.fullmatch(queue) is None:
        raise fail("QUEUE", "must be a queue name: 1 to 80 letters, digits, '-' or '_'")
    connection = entry.get("CONNECTION", None)
    if connection is None:
        connection = default_connection
    if type(connection) is not str or connection not in connections:
        raise fail("CONNECTION", f"must name one of KINETIS_QUEUE['CONNECTIONS'] ({', '.join(connections)})")
    catch_up = entry.get("CATCH_UP", "skip")
    if catch_up not in CATCH_UP_POLICIES:
        raise fail("CATCH_UP", f"must be one of {', '.join(map(repr, CATCH_UP_POLICIES))}")
    limit = entry.get("CATCH_UP_LIMIT", DEFAULT_CATCH_UP_LIMIT)
    if type(limit) is not int or not 1 <= limit <= MAX_CATCH_UP_LIMIT:
        raise fail("CATCH_UP_LIMIT", f"must be an int from 1 to {MAX_CATCH_UP_LIMIT}")
    result = Schedule(
        name=name,
        job_class=job_class,
        args=dict(args),
        queue=queue,
        connection=connection,
        timezone=timezone,
        catch_up=catch_up,
        catch_up_limit=limit,
        cron=cron,
        every=every,
        source=source,
    )
    _check_arguments(result, fail)
    return result


def _check_arguments(found: Schedule, fail: Callable[[str, str], ScheduleConfigurationError]) -> None:
    """ARGS build the job and pass the argument contract (the checks push() makes before any I/O)."""

    try:
        job = found.build_job()
    except TypeError as exc:
        # The message is the constructor's own complaint about names (a missing or unexpected
        # argument), never a value; anything else is summarized by its type alone.
        text = str(exc)
        shown = text if "argument" in text else type(exc).__name__
        raise fail("ARGS", f"do not fit {found.job_path}'s constructor: {shown}") from None
    except Exception as exc:
        raise fail("ARGS", f"do not build a {found.job_path}: its constructor raised {type(exc).__name__}") from None
    try:
        serialize_job(job)
    except UnserializableJobError as exc:
        raise fail("ARGS", f"do not pass the argument contract: {exc}") from None


def collect() -> tuple[list[Schedule], list[ScheduleConfigurationError]]:
    """Every declared schedule validated: the good ones, and one error per bad one (all of them)."""

    try:
        loaded = conf.load()
    except QueueConfigurationError:
        return [], []  # kinetis_queue.E001 reports it; schedules cannot be checked without connections
    raw = getattr(settings, "KINETIS_QUEUE", None) or {}
    entries = raw.get(SETTING, {})
    if not isinstance(entries, Mapping):
        return [], [ScheduleConfigurationError(f"KINETIS_QUEUE[{SETTING!r}] must be a dict of name -> schedule")]
    good: list[Schedule] = []
    errors: list[ScheduleConfigurationError] = []
    sources: list[tuple[Any, Any, str]] = [(name, entry, "settings") for name, entry in entries.items()]
    sources += [(name, entry, "decorator") for name, (_cls, entry) in _declared.items()]
    seen: set[str] = set()
    for name, entry, source in sources:
        if type(name) is not str or NAME.fullmatch(name) is None:
            errors.append(
                ScheduleConfigurationError(
                    f"schedule name {name!r} is invalid: use 1 to 100 letters, digits, '_', '.', ':' or '-'"
                )
            )
            continue
        if name in seen or name in _redeclared:
            errors.append(
                ScheduleConfigurationError(
                    f"schedule {name!r} is declared twice (in KINETIS_QUEUE[{SETTING!r}] and/or by @schedule)"
                )
            )
            continue
        seen.add(name)
        try:
            good.append(_entry(name, entry, source, loaded.connections, loaded.default_connection))
        except ScheduleConfigurationError as exc:
            errors.append(exc)
    return good, errors


def load() -> list[Schedule]:
    """Every declared schedule, validated; raises the first ScheduleConfigurationError."""
    good, errors = collect()
    if errors:
        raise errors[0]
    return good
