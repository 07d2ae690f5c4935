"""The options ``@task(...)`` takes on KinetisTaskBackend, and their rules (docs/django-tasks.md).

Django 6.1 hands every keyword of ``@task(**kwargs)`` it does not know itself to the backend's
``task_class``; KinetisTaskBackend's is ``KinetisTask``, a ``Task`` with the fields below. An unknown
keyword is Django's own ``TypeError`` naming it; a bad value is ``InvalidTask`` naming the option,
raised at definition (``Task.__post_init__`` runs ``validate_task``) and again at enqueue.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kinetis_queue.contrib.tasks.compat import InvalidTask, Task
from kinetis_queue.exceptions import InvalidQueueArgumentError
from kinetis_queue.expiry import MAX_EXPIRES
from kinetis_queue.limits import MAX_KEY_LENGTH as MAX_CONCURRENCY_KEY
from kinetis_queue.limits import MAX_SLOTS
from kinetis_queue.ratelimits import MAX_KEY_LENGTH as MAX_RATE_KEY
from kinetis_queue.ratelimits import RateLimit, as_rate_limit
from kinetis_queue.unique import MAX_UNIQUE_FOR, Until
from kinetis_queue.validation import MAX_RETRY_DELAY
from kinetis_queue.worker.settlement import BACKOFFS

#: The options KinetisTask adds to Django's Task, in the order the docs list them.
OPTION_NAMES = (
    "max_attempts",
    "retry_delay",
    "backoff",
    "timeout",
    "unique_for",
    "unique_until",
    "concurrency_limit",
    "concurrency_key",
    "rate_limit",
    "rate_key",
    "expires",
)

if TYPE_CHECKING:  # the stubs make Task generic; the runtime class is not subscriptable
    _TaskBase = Task[..., Any]
else:
    _TaskBase = Task


@dataclass(frozen=True, slots=True, kw_only=True)
class KinetisTask(_TaskBase):
    """A django.tasks Task with kinetis_queue's per-task options; None (or the default) leaves each to
    the connection and worker settings. ``dataclasses.replace(task, ...)`` changes them per call."""

    #: Attempts before the task fails for good (the job's max_attempts); None: the worker's MAX_ATTEMPTS.
    max_attempts: int | None = None
    #: Seconds before the first retry; None: the worker's RETRY_BASE_DELAY (--backoff).
    retry_delay: float | None = None
    #: "exponential" (the delay doubles each retry, the worker's rule) or "fixed" (the same delay each time).
    backoff: str = "exponential"
    #: Hard limit in seconds on one attempt, in place of the worker's TIMEOUT (--timeout); None: the worker's.
    timeout: float | None = None
    #: Seconds during which an enqueue of the same task with the same arguments returns the waiting
    #: task's result instead of queueing another (a unique job); None: not unique.
    unique_for: float | None = None
    #: How long the key is held: "settled" (until the task succeeds or fails for good), "started", "expired".
    unique_until: str = "settled"
    #: At most this many runs of the task at once across every worker (a concurrency limit); None: no limit.
    concurrency_limit: int | None = None
    #: The limit's key: tasks naming the same key share its slots; None: the task's own path.
    concurrency_key: str | None = None
    #: At most N starts per S seconds across every worker, ``(N, S)`` or a RateLimit (kinetis_queue.ratelimits);
    #: None: no rate limit.
    rate_limit: tuple[int, float] | RateLimit | None = None
    #: The rate limit's key: tasks naming the same key share its window; None: the task's own path.
    rate_key: str | None = None
    #: Seconds after the enqueue by which a run must have started, else it never runs (kinetis_queue.expiry);
    #: None: never expires.
    expires: float | None = None


def _number(value: object) -> bool:
    return type(value) in (int, float) and math.isfinite(value)  # type: ignore[arg-type]


def validate_options(task: KinetisTask) -> None:
    """Raise InvalidTask naming the first option of ``task`` whose value is out of its range."""
    if task.max_attempts is not None and (type(task.max_attempts) is not int or task.max_attempts < 1):
        raise InvalidTask("max_attempts must be an int of 1 or more (or None: the worker's MAX_ATTEMPTS).")
    if task.retry_delay is not None and not (_number(task.retry_delay) and 0 <= task.retry_delay <= MAX_RETRY_DELAY):
        raise InvalidTask(f"retry_delay must be a number of seconds from 0 to {MAX_RETRY_DELAY} (or None).")
    if task.backoff not in BACKOFFS:
        raise InvalidTask(f"backoff must be one of {', '.join(map(repr, BACKOFFS))}.")
    if task.timeout is not None and not (_number(task.timeout) and task.timeout > 0):
        raise InvalidTask("timeout must be a number of seconds above 0 (or None: the worker's TIMEOUT).")
    if task.unique_for is not None and not (_number(task.unique_for) and 0 < task.unique_for <= MAX_UNIQUE_FOR):
        raise InvalidTask(f"unique_for must be a number of seconds above 0, at most {MAX_UNIQUE_FOR} (or None).")
    if task.unique_until not in {u.value for u in Until}:
        raise InvalidTask(f"unique_until must be one of {', '.join(repr(u.value) for u in Until)}.")
    limit = task.concurrency_limit
    if limit is not None and (type(limit) is not int or not 1 <= limit <= MAX_SLOTS):
        raise InvalidTask(f"concurrency_limit must be an int from 1 to {MAX_SLOTS} (or None).")
    key = task.concurrency_key
    if key is not None:
        if type(key) is not str or not 0 < len(key) <= MAX_CONCURRENCY_KEY:
            raise InvalidTask(f"concurrency_key must be a str of 1 to {MAX_CONCURRENCY_KEY} characters (or None).")
        if limit is None:
            raise InvalidTask("concurrency_key needs concurrency_limit.")
    if task.rate_limit is not None:
        try:
            as_rate_limit(task.rate_limit, "rate_limit")
        except InvalidQueueArgumentError as exc:
            raise InvalidTask(f"{exc} (or None).") from None
    if task.expires is not None and not (_number(task.expires) and 0 < task.expires <= MAX_EXPIRES):
        raise InvalidTask(f"expires must be a number of seconds above 0, at most {MAX_EXPIRES} (or None).")
    rate_key = task.rate_key
    if rate_key is not None:
        if type(rate_key) is not str or not 0 < len(rate_key) <= MAX_RATE_KEY:
            raise InvalidTask(f"rate_key must be a str of 1 to {MAX_RATE_KEY} characters (or None).")
        if task.rate_limit is None:
            raise InvalidTask("rate_key needs rate_limit.")
