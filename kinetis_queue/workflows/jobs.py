"""The callback carrier: a batch's on_success / on_failure / on_complete job, run at most once at a time.

The callback job is stored inside the carrier (its class path and arguments, as push() serialized
them; shown as ``[redacted]`` whole, as a queued receiver's) and rebuilt on the worker, under the
usual resolution rules. The carrier's concurrency limit
(one slot per workflow and callback) keeps two deliveries of it from running at once; the worker's
workflow hook skips a delivery whose callback already ended.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from kinetis_queue.job import Job, JobContext, Sensitive, call_handle, job_class_path
from kinetis_queue.limits import limit_concurrency
from kinetis_queue.payload.serializer import deserialize_job, serialize_job


@limit_concurrency(key=lambda job: f"{job.workflow}:{job.callback}", max=1, delay=1.0)
class WorkflowCallback(Job):
    """Runs a batch's callback job; never two deliveries of one callback at once."""

    def __init__(
        self, workflow: str, callback: str, inner_class: str, inner_args: Annotated[dict[str, Any], Sensitive]
    ) -> None:
        self.workflow = workflow
        self.callback = callback
        self.inner_class = inner_class
        self.inner_args = inner_args

    @classmethod
    def wrapping(cls, workflow: str, callback: str, job: Job) -> WorkflowCallback:
        """The carrier of ``job`` as ``callback`` of ``workflow`` (its arguments checked as push() checks them)."""
        inner_class, inner_args = serialize_job(job)
        return cls(workflow, callback, inner_class, inner_args)

    @classmethod
    def display_name(cls, args: Mapping[str, Any]) -> str:
        inner = args.get("inner_class")
        return str(inner) if isinstance(inner, str) else job_class_path(cls)

    def handle(self, context: JobContext) -> None:
        call_handle(deserialize_job(self.inner_class, self.inner_args), context)
