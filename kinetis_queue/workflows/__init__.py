"""Chains and batches (docs/workflows.md): compose jobs, see their progress, cancel them, on every backend.

``chain([...])`` runs its members in order, each pushed once the one before succeeded; ``batch([...],
on_success=..., on_failure=..., on_complete=...)`` runs them independently and fires each callback once.
A member is a Job, or a ``Chain`` / ``Batch`` (not dispatched on its own: it starts when its parent
reaches it). Both return a payload-free ``WorkflowHandle``. State lives in the Django database
(kinetis_queue/workflows/engine.py says in which order it is written, and why nothing is lost).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kinetis_queue.connections import queues
from kinetis_queue.control import cancel_many
from kinetis_queue.job import Job
from kinetis_queue.validation import validate_queue_name
from kinetis_queue.workflows import engine, inline
from kinetis_queue.workflows.spec import Batch, Chain

__all__ = ["Batch", "Chain", "WorkflowHandle", "batch", "chain", "handle"]


class WorkflowHandle:
    """A dispatched chain or batch: its id, its status, and a way to cancel it. Holds no job data."""

    def __init__(self, workflow_id: str) -> None:
        self.id = workflow_id

    def status(self) -> dict[str, Any]:
        """``{"state": ..., "total": n, "pending": n, "running": n, "succeeded": n, "failed": n,
        "cancelled": n, "kind": ..., "callbacks": {name: state}}``; state is "running", "succeeded",
        "failed" or "cancelled" (a nested workflow counts as one member); a callback that will never fire
        (the batch ended the other way) is "skipped"."""

        return engine.status(self.id)

    def cancel(self) -> bool:
        """Cancel what has not ended: waiting members never start, queued ones are skipped when popped,
        running ones see ``context.cancelled``; no callback fires. False when it had ended already."""

        told = engine.cancel(self.id)
        _tell_running(told)
        return bool(told) or engine.status(self.id)["state"] == "cancelled"

    def __repr__(self) -> str:
        return f"<WorkflowHandle {self.id}>"


def chain(
    jobs: Sequence[Job | Chain | Batch], *, queue: str = "default", connection: str | None = None
) -> WorkflowHandle:
    """Dispatch a chain on ``connection`` (default: the default one): members run in order on ``queue``.

    Every job is checked and serialized first, as push() would: a bad one raises and nothing is written.
    """
    return _dispatch(Chain(list(jobs)), queue, connection)


def batch(
    jobs: Sequence[Job | Chain | Batch],
    *,
    on_success: Job | None = None,
    on_failure: Job | None = None,
    on_complete: Job | None = None,
    fail_fast: bool = True,
    queue: str = "default",
    connection: str | None = None,
) -> WorkflowHandle:
    """Dispatch a batch: members run independently on ``queue``; ``on_success`` runs once when every member
    succeeded, ``on_failure`` once at the first member that fails for good (``fail_fast``) or once all settled,
    ``on_complete`` once when all settled."""
    return _dispatch(Batch(list(jobs), on_success, on_failure, on_complete, fail_fast), queue, connection)


def handle(workflow_id: str) -> WorkflowHandle:
    """The handle of a dispatched chain or batch, by its id (``handle.id``)."""
    return WorkflowHandle(workflow_id)


def _dispatch(spec: Chain | Batch, queue_name: str, connection: str | None) -> WorkflowHandle:

    validate_queue_name(queue_name)
    target = queues.default() if connection is None else queues[connection]
    if target.runs_inline:
        return WorkflowHandle(inline.run(spec, target, queue_name).pk)
    return WorkflowHandle(engine.dispatch(spec, target, queue_name).pk)


def _tell_running(told: list[tuple[str, str]]) -> None:
    """Cancel the pushed members' jobs, so a queued one is skipped and a running one sees context.cancelled:
    per connection at once (``cancel_many()``), so the statements do not grow with the member count."""

    per_connection: dict[str, list[str]] = {}
    for connection, job_id in told:
        per_connection.setdefault(connection, []).append(job_id)
    for connection, job_ids in per_connection.items():
        cancel_many(job_ids, connection)
