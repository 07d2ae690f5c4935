"""The django.tasks API, from Django 6 or, on Django 5.2, from the ``django-tasks`` backport."""

from __future__ import annotations

try:
    from django.tasks import TaskContext, default_task_backend, task, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError, TaskResult, TaskResultStatus
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
except ImportError:  # pragma: no cover  # Django < 6 only (the 5.2 stage runs without coverage): the backport
    from django_tasks import (  # type: ignore[no-redef,import-not-found]
        TaskContext,
        default_task_backend,
        task,
        task_backends,
    )
    from django_tasks.backends.base import BaseTaskBackend  # type: ignore[no-redef,import-not-found]
    from django_tasks.base import (  # type: ignore[no-redef,import-not-found]
        Task,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django_tasks.exceptions import (  # type: ignore[no-redef,import-not-found]
        InvalidTaskError as InvalidTask,
    )
    from django_tasks.exceptions import (  # type: ignore[no-redef,import-not-found,unused-ignore]
        TaskResultDoesNotExist,
    )
    from django_tasks.signals import (  # type: ignore[no-redef,import-not-found]
        task_enqueued,
        task_finished,
        task_started,
    )
    from django_tasks.utils import normalize_json  # type: ignore[no-redef,import-not-found]

__all__ = [
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "default_task_backend",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
