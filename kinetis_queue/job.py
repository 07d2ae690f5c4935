"""The Job base class, the Sensitive marker, JobContext, and resolution of stored class names."""

from __future__ import annotations

import inspect
import logging
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final

from kinetis_queue.exceptions import UnresolvableJobParameterError
from kinetis_queue.validation import MAX_RETRY_DELAY

if TYPE_CHECKING:
    from kinetis_queue.limits.store import ConcurrencyLimit


class _SensitiveMarker:
    """Marks a job argument whose value, and location in errors, must never be logged."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Sensitive"


#: Use as ``Annotated[str, Sensitive]`` on an ``__init__`` parameter: its value is shown as
#: ``[redacted]``, and scrubbed from a failure's message and traceback (a value of 4 characters or more
#: is replaced where it occurs; a text in which a shorter string occurs as a word is withheld whole;
#: a number under 4 characters is not searched for).
Sensitive: Final = _SensitiveMarker()


class Job:
    """Base class of every job: ``__init__`` parameters are stored, ``handle()`` runs on the worker.

    Each ``__init__`` parameter is read back from the same-named attribute at push time, so the
    constructor must keep its arguments (a ``@dataclass`` subclass does this on its own).
    """

    #: Every Job subclass this process has imported, by dotted path (module.QualName).
    _registry: ClassVar[dict[str, type[Job]]] = {}

    # Unique jobs (kinetis_queue.unique, docs/unique-jobs.md); a push may override each of them. A
    # class may also define ``unique_key(self) -> str``; without one, the key is the class and its arguments.
    #: Seconds a job of this class holds its key; None: not unique.
    unique_for: ClassVar[float | None] = None
    #: How long the key is held: "settled" (until acked or failed for good), "started", or "expired".
    unique_until: ClassVar[str] = "settled"
    #: With unique_until "started": a push while the holder waits replaces its arguments and delay.
    unique_debounce: ClassVar[bool] = False
    #: "return" the holder's id when the key is held, or "raise" DuplicateJobError.
    unique_on_duplicate: ClassVar[str] = "return"
    #: Set by ``@limit_concurrency`` (kinetis_queue.limits): at most N jobs of one key run at once.
    concurrency_limit: ClassVar[ConcurrencyLimit | None] = None
    #: A model instance argument whose row is gone by the time the job runs (docs/job-arguments.md):
    #: False fails the job at once, naming the model and key; True acks it without running it.
    delete_when_missing_models: ClassVar[bool] = False
    #: Order within a queue (kinetis_queue.priority, docs/priority.md): -100 to 100, higher first; a
    #: push may override it. 0, the default, is the store's plain FIFO path.
    priority: ClassVar[int] = 0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        Job._registry[job_class_path(cls)] = cls

    def concurrency_limit_for(self) -> ConcurrencyLimit | None:
        """This job's concurrency limit, read by the worker before each attempt: its class's
        (``@limit_concurrency``) unless a subclass decides per job (the django.tasks carrier job does)."""
        return type(self).concurrency_limit

    def handle(self, *args: Any, **kwargs: Any) -> None:
        """Do the work; may take ``context: JobContext``. Raising fails this attempt."""
        raise NotImplementedError(f"{type(self).__qualname__} must define handle()")

    @classmethod
    def display_name(cls, args: Mapping[str, Any]) -> str:
        """The name operators see for a job of this class stored with ``args``: its dotted path.

        A job that only carries another callable (a django.tasks task, a queued receiver) names
        that callable instead. Never an argument's value beyond such a name.
        """
        return job_class_path(cls)


@dataclass(frozen=True, slots=True)
class JobContext:
    """What a running job may know about its delivery; injected into ``handle(context: JobContext)``."""

    id: str
    queue: str
    attempts: int
    max_attempts: int | None
    connection: str | None
    logger: logging.Logger | logging.LoggerAdapter[logging.Logger]
    #: How many times this job was snoozed before this delivery (see Snooze); 0 on a plain delivery.
    snoozes: int = 0
    #: Answers ``cancelled`` (the worker's hooks); a context built by hand is never cancelled.
    cancel_check: Callable[[], bool] = field(default=lambda: False, repr=False, compare=False)

    @property
    def cancelled(self) -> bool:
        """Whether ``cancel(job_id)`` was called for this job: a job that runs long should look now and
        then and stop cooperatively (the worker notices a cancellation within about a second)."""
        return self.cancel_check()


#: The longest delay a Snooze may ask for, in seconds: the worker's retry ceiling (SQS's delay limit too).
MAX_SNOOZE_DELAY: Final = MAX_RETRY_DELAY


class Snooze(Exception):  # a request to the worker, not an error
    """Raised from ``handle()``: the job cannot start yet; put it back for ``delay`` seconds.

    A snooze is neither a success nor a failure: the worker stores a replacement of the delivery
    (same job id, attempts starting over, ``JobContext.snoozes`` one higher) and only then acks
    this delivery, so the job is never lost and the snooze never counts against the failure cap.
    The job itself must bound how often it snoozes (``context.snoozes``). ``reason`` is logged:
    never put an argument's value in it.
    """

    def __init__(self, delay: float, reason: str) -> None:
        if type(delay) not in (int, float) or not 0 <= delay <= MAX_SNOOZE_DELAY:
            raise ValueError(f"a snooze delay must be a number of seconds from 0 to {MAX_SNOOZE_DELAY}")
        super().__init__(reason)
        self.delay = float(delay)
        self.reason = reason


#: Longest dotted class path a job can be stored under (the SQL column's width).
MAX_CLASS_PATH: Final = 255


#: The one part of a qualified name that is not an identifier: a class defined inside a function.
LOCALS_PART: Final = "<locals>"


def job_class_path(cls: type) -> str:
    """The dotted path a job class is stored under."""
    return f"{cls.__module__}.{cls.__qualname__}"


def is_class_path(path: str) -> bool:
    """Whether ``path`` is a storable job class path: push() writes only these, and a stored one is
    checked against the same rule (anything else is malformed data).

    ``module.QualName``: at most MAX_CLASS_PATH characters, dot-separated Python identifiers (so no
    NUL, control character, space or lone surrogate), with ``<locals>`` allowed inside the qualified
    name, and at least a module and a class name.
    """
    if not 0 < len(path) <= MAX_CLASS_PATH:
        return False
    parts = path.split(".")
    if len(parts) < 2 or not parts[0].isidentifier() or not parts[-1].isidentifier():
        return False
    return all(part.isidentifier() or part == LOCALS_PART for part in parts[1:-1])


def display_name(path: str, args: Mapping[str, Any]) -> str:
    """What worker lines, ``queue_failed`` and the admin call a stored job: the class's own
    ``display_name(args)`` when this process knows the class, else the stored path. Imports nothing."""
    cls = Job._registry.get(path)
    if cls is None:
        return path
    try:
        return cls.display_name(args)
    except Exception:
        return path


#: Per job class: for each handle() parameter, whether it receives the JobContext.
_handle_plans: dict[type[Job], tuple[str, ...] | UnresolvableJobParameterError] = {}


def _handle_plan(cls: type[Job]) -> tuple[str, ...]:
    plan = _handle_plans.get(cls)
    if plan is None:
        plan = _build_handle_plan(cls)
        _handle_plans[cls] = plan
    if isinstance(plan, UnresolvableJobParameterError):
        raise UnresolvableJobParameterError(str(plan))
    return plan


def _build_handle_plan(cls: type[Job]) -> tuple[str, ...] | UnresolvableJobParameterError:
    try:
        signature = inspect.signature(cls.handle)
        hints = typing.get_type_hints(cls.handle)
    except Exception as exc:  # a hint naming something that no longer imports, for instance
        return UnresolvableJobParameterError(
            f"{job_class_path(cls)}.handle() parameters cannot be inspected ({type(exc).__name__})"
        )
    names: list[str] = []
    for index, (name, parameter) in enumerate(signature.parameters.items()):
        if index == 0 and name == "self":
            continue
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if hints.get(name) is not JobContext:
            return UnresolvableJobParameterError(
                f"{job_class_path(cls)}.handle() parameter {name!r} cannot be resolved: "
                "only a parameter annotated JobContext is injected"
            )
        names.append(name)
    return tuple(names)


def handle_arguments(job: Job, context: JobContext) -> dict[str, JobContext]:
    """The keyword arguments ``job.handle()`` takes: ``context`` for each parameter annotated JobContext."""
    return dict.fromkeys(_handle_plan(type(job)), context)


def call_handle(job: Job, context: JobContext) -> None:
    """Invoke ``job.handle()``, passing ``context`` to each parameter annotated JobContext.

    An ``async def handle`` is run to its end here with ``asyncio.run()`` (the sync backend's inline
    run); the worker runs it on its process's event loop instead (kinetis_queue.worker.async_loop).
    """
    handle: Any = job.handle
    result = handle(**handle_arguments(job, context))
    if inspect.iscoroutine(result):
        import asyncio

        asyncio.run(result)
