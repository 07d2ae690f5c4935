"""django.tasks functions with KinetisTaskBackend's options (tests/integrations/test_tasks_options.py and
test_tasks_signals.py); listed in IMPORTS (tests/settings.py) so worker subprocesses know them too."""

from __future__ import annotations

import time
from typing import Any

from kinetis_queue.contrib.tasks.compat import TaskContext, task

#: Calls seen in this process: (name, attempt).
SEEN: list[tuple[Any, ...]] = []


def plain(x: int = 0) -> int:
    """Not a task: test_tasks_options.py wraps it with task(...) to check option validation."""
    return x


@task(takes_context=True, max_attempts=2, retry_delay=0)
def always_fails(context: TaskContext) -> None:
    SEEN.append(("always_fails", context.attempt))
    raise ValueError("fails every time")


@task(takes_context=True, max_attempts=3, retry_delay=7, backoff="fixed")
def fails_with_fixed_delay(context: TaskContext) -> None:
    SEEN.append(("fails_with_fixed_delay", context.attempt))
    raise ValueError("fails every time")


@task(takes_context=True, max_attempts=3, retry_delay=3)
def fails_with_growing_delay(context: TaskContext) -> None:
    SEEN.append(("fails_with_growing_delay", context.attempt))
    raise ValueError("fails every time")


# 2 s: the attempt's clock starts before the body (the task's result is marked running first), and on a loaded
# machine 0.5 s ran out before the body's first line (test_a_retried_task_keeps_its_timeout, SEEN empty).
@task(timeout=2, max_attempts=1)
def sleeps(seconds: float) -> str:
    SEEN.append(("sleeps", seconds))
    time.sleep(seconds)
    return "woke"


@task(unique_for=60)
def unique_add(a: int, b: int) -> int:
    SEEN.append(("unique_add", a, b))
    return a + b


@task(concurrency_limit=1)
def one_at_a_time(label: str) -> str:
    SEEN.append(("one_at_a_time", label))
    return label


@task(rate_limit=(1, 60))
def once_a_minute(label: str) -> str:
    SEEN.append(("once_a_minute", label))
    return label


@task(takes_context=True, retry_delay=0)
def fails_once(context: TaskContext) -> int:
    SEEN.append(("fails_once", context.attempt))
    if context.attempt == 1:
        raise RuntimeError("the first attempt fails")
    return context.attempt
