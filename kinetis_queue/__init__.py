"""kinetis_queue: background jobs for Django with at-least-once delivery, on SQL, Redis, SQS and RabbitMQ.

The public names are re-exported here; see DESIGN.md for the contract they implement.
"""

from __future__ import annotations

from kinetis_queue.connections import queue, queues
from kinetis_queue.contracts import (
    ClearableQueue,
    DisposableQueue,
    JobSettlement,
    Queue,
    QueuedJob,
    RenewableQueue,
)
from kinetis_queue.dispatch import push_on_commit
from kinetis_queue.job import Job, JobContext, Sensitive

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
    "push_on_commit",
    "queue",
    "queues",
]
