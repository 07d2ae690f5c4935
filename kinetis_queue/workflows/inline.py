"""Chains and batches on the sync backend: run inline, in the caller's thread, as the sync backend runs a push.

The same tables and the same state machine (engine.py) as on a durable backend, with the pushes
run at once instead of sent: a member runs, its end is written, and what it started runs next, until
nothing is left. A chain whose member fails raises that member's exception once its state is written
(as a sync push raises its job's); a batch does not raise (its on_failure callback is what reacts).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Sequence

from kinetis_queue.backends.sync import SyncQueue
from kinetis_queue.contracts import PreparedPush, Queue
from kinetis_queue.job import JobContext, call_handle
from kinetis_queue.payload.serializer import deserialize_job
from kinetis_queue.workflows import engine
from kinetis_queue.workflows.models import Workflow
from kinetis_queue.workflows.spec import Batch, Chain

logger = logging.getLogger("kinetis_queue.sync")


class _Collecting(SyncQueue):
    """The sync connection, collecting the workflow's pushes instead of running them inside send_many()."""

    def __init__(self, queue: Queue) -> None:
        super().__init__(connection=queue.connection)
        self.pending: deque[PreparedPush] = deque()

    def send_many(self, prepared: Sequence[PreparedPush]) -> list[str]:
        self.pending.extend(prepared)
        return [item.id for item in prepared]


def run(spec: Chain | Batch, queue: Queue, queue_name: str) -> Workflow:
    """Dispatch ``spec`` and run every member it starts, in order, until the tree ended; its top row."""
    collecting = _Collecting(queue)
    root = engine.dispatch(spec, collecting, queue_name)
    first_error: Exception | None = None
    while collecting.pending:
        prepared = collecting.pending.popleft()
        envelope = prepared.envelope
        reference = envelope.metadata[engine.METADATA_KEY]
        context = JobContext(envelope.id, prepared.queue, 1, envelope.max_attempts, queue.connection, logger)
        try:
            call_handle(deserialize_job(envelope.job_class, envelope.args), context)
        except Exception as exc:
            first_error = first_error or exc
            engine.finish(collecting, reference["id"], reference["i"], False)
        else:
            engine.finish(collecting, reference["id"], reference["i"], True)
    if first_error is not None and isinstance(spec, Chain):
        raise first_error
    return root
