"""django.tasks functions for tests/integrations/test_tasks.py (module level in an installed app, as workers need)."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

from kinetis_queue.contrib.tasks.compat import TaskContext, task

#: Calls seen in this process.
SEEN: list[tuple[Any, ...]] = []


@task
def add(a: int, b: int) -> int:
    SEEN.append(("add", a, b))
    return a + b


@task
def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    SEEN.append(("echo", args, kwargs))
    return {"args": list(args), "kwargs": kwargs}


@task
def explode() -> None:
    SEEN.append(("explode",))
    raise ValueError("task failed on purpose")


@task(takes_context=True)
def flaky(context: TaskContext) -> int:
    SEEN.append(("flaky", context.attempt))
    if context.attempt == 1:
        raise ConnectionError("first attempt fails")
    return context.attempt


@task
async def async_double(x: int) -> int:
    SEEN.append(("async_double", x))
    return x * 2


@task
def returns_unstorable() -> datetime:
    SEEN.append(("returns_unstorable",))
    return datetime(2026, 1, 1)


@task(takes_context=True)
def hangs_on_first_attempt(context: TaskContext, marker: str) -> int:
    if context.attempt == 1:
        Path(marker).write_text("running")
        time.sleep(600)
    return context.attempt


@task(takes_context=True)
def fails_twice(context: TaskContext) -> int:
    """Fails on its first two runs; ``context.attempt`` counts every run, across retries too."""
    SEEN.append(("fails_twice", context.attempt))
    if context.attempt <= 2:
        raise RuntimeError("fails on the first two runs")
    return context.attempt
