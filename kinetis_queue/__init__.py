"""kinetis_queue: background jobs for Django with at-least-once delivery, on SQL, Redis, SQS and RabbitMQ.

The public names are re-exported here; see DESIGN.md for the contract they implement.
"""

from __future__ import annotations

from typing import Any

from kinetis_queue.connections import queue, queues
from kinetis_queue.contracts import (
    ClearableQueue,
    DisposableQueue,
    JobSettlement,
    Queue,
    QueuedJob,
    RenewableQueue,
)
from kinetis_queue.control import cancel
from kinetis_queue.dispatch import push_on_commit
from kinetis_queue.job import Job, JobContext, Sensitive
from kinetis_queue.limits import limit_concurrency
from kinetis_queue.values import register_value

#: The one source of the version (pyproject.toml reads it; CHANGELOG.md names each release).
__version__ = "0.1.0"

__all__ = [
    "ClearableQueue",
    "DisposableQueue",
    "Job",
    "JobContext",
    "JobSettlement",
    "Queue",
    "QueuedJob",
    "RenewableQueue",
    "Sensitive",
    "batch",
    "cancel",
    "chain",
    "limit_concurrency",
    "push_on_commit",
    "queue",
    "queues",
    "register_value",
]


def __getattr__(name: str) -> Any:
    # Chains and batches load the workflow tables: imported on first use, once the app registry is ready.
    if name in ("chain", "batch"):
        from kinetis_queue import workflows

        return getattr(workflows, name)
    raise AttributeError(name)
