"""The worker's side of chains and batches (kinetis_queue.hooks): skip what ended or was cancelled, move
workflows on just before a member's ack or final fail(), and push what a dead pusher left.

Only deliveries whose metadata names a workflow cost anything: two queries before their attempt,
one transaction before their settlement. RECOVER_EVERY seconds, a background loop pushes the members
of the worker's connection left "pushing" for PUSH_GRACE (engine.recover()).
"""

from __future__ import annotations

from typing import Any, Final

from django.utils import timezone

from kinetis_queue.contracts import Queue, QueuedJob
from kinetis_queue.middleware import Middleware
from kinetis_queue.outcomes import SkipDelivery, WillNeverRun
from kinetis_queue.worker.background import BackgroundLoop
from kinetis_queue.workflows import engine
from kinetis_queue.workflows.models import WorkflowMember

#: Seconds between two looks for members whose push was never confirmed.
RECOVER_EVERY: Final = 10.0


def member_of(job: QueuedJob) -> tuple[str, int] | None:
    """(workflow id, member index) of a workflow member's delivery, from its metadata; None otherwise."""
    data = job.metadata.get(engine.METADATA_KEY) if job.metadata else None
    if type(data) is not dict:
        return None
    workflow, index = data.get("id"), data.get("i")
    if type(workflow) is not str or type(index) is not int:
        return None
    return workflow, index


class WorkflowHooks(Middleware):
    """See the module docstring."""

    def __init__(self) -> None:
        self.queue: Queue | None = None
        self._loop: BackgroundLoop | None = None

    def start(self, queue: Queue) -> None:
        self.queue = queue
        if queue.connection is not None and self._loop is None:
            self._loop = BackgroundLoop("workflow recovery", self._recover)
            self._loop.start()

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.stop()
            self._loop = None

    def _recover(self) -> float:
        if self.queue is not None:
            engine.recover(self.queue)
        return RECOVER_EVERY

    def admit(self, job: QueuedJob) -> None:
        ref = member_of(job)
        if ref is None:
            return
        workflow, index = ref
        rows = WorkflowMember.objects.using(engine.database()).filter(workflow_id=workflow, index=index)
        found: Any = rows.values_list("state", "workflow__state").first()
        if found is None:
            return  # its workflow was pruned: run it as a plain job
        state, workflow_state = found
        if state == "cancelled" or workflow_state == "cancelled":
            raise SkipDelivery("its chain or batch was cancelled")
        if state in engine.FINAL:
            # A redelivery of a member whose end was written: its earlier delivery died before it
            # pushed what that end started (or before its ack); finish those pushes now.
            if self.queue is not None:
                engine.push_leftovers(self.queue, workflow)
            raise SkipDelivery(f"this member of its chain or batch has {state} already")
        rows.filter(state__in=("pushing", "queued")).update(state="running", updated_at=timezone.now())

    def succeeding(self, job: QueuedJob) -> None:
        self._finish(job, True)

    def failing(self, job: QueuedJob) -> None:
        self._finish(job, False)

    def skipped(self, job: QueuedJob, skipped: SkipDelivery) -> None:
        """A step that will never run (expired, its model gone) ends as failed: the chain stops there and a batch's
        callbacks see it, as for a failure."""
        if isinstance(skipped, WillNeverRun):
            self._finish(job, False)

    def _finish(self, job: QueuedJob, succeeded: bool) -> None:
        ref = member_of(job)
        if ref is not None and self.queue is not None:
            engine.finish(self.queue, ref[0], ref[1], succeeded)


#: Its name in KINETIS_QUEUE["MIDDLEWARE"] (kinetis_queue.middleware.DEFAULT_MIDDLEWARE).
WorkflowMiddleware = WorkflowHooks
