"""SyncQueue: runs each job inline, inside push(), after exactly the validation every backend applies."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kinetis_queue.contracts import ClearableQueue, JobSettlement, QueuedJob, QueueStats, Withdrawal
from kinetis_queue.exceptions import StaleJobHandleError
from kinetis_queue.job import JobContext, call_handle
from kinetis_queue.payload.envelope import Envelope
from kinetis_queue.payload.serializer import deserialize_job
from kinetis_queue.schema import BackendOptions, BuiltinBackend
from kinetis_queue.validation import validate_queue_list, validate_timeout

logger = logging.getLogger("kinetis_queue.sync")

#: The sync backend takes no keys of its own.
OPTIONS = BackendOptions()
#: This backend, as conf finds it (kinetis_queue.conf.builtin_backends).
BACKEND = BuiltinBackend("sync", "kinetis_queue.backends.sync.SyncQueue", OPTIONS)


class SyncQueue(ClearableQueue):
    """No store, no reservation, no renewal: ``push()`` validates and serializes, then runs the job.

    The job is rebuilt from its serialized arguments, as a worker would, so a job that works here
    works on a durable backend too. An exception from the job propagates from ``push()``. Delay and
    max_attempts are validated and otherwise ignored, and so is priority (each job runs at its push, so
    there is nothing to order: ``supports_priority`` is True, as on Django's ImmediateBackend). Nothing
    is ever waiting: ``pop()`` finds
    nothing, ``size()`` and ``clear()`` are 0, and a settlement names no live delivery.
    """

    backend_name = "sync"
    settings_schema = OPTIONS
    runs_inline = True
    supports_priority = True

    def _push(self, envelope: Envelope, delay: float, queue: str) -> None:
        job = deserialize_job(envelope.job_class, envelope.args)
        context = JobContext(envelope.id, queue, 1, envelope.max_attempts, self.connection, logger)
        call_handle(job, context)

    def _sweep(self, queues: tuple[str, ...]) -> QueuedJob | None:
        return None  # pragma: no cover  required by Queue (abstract); this pop() never calls it

    def pop(self, timeout: float, queues: Sequence[str]) -> QueuedJob | None:
        """Validates like every backend, then returns None at once: nothing can ever arrive."""
        validate_timeout(timeout)
        validate_queue_list(queues)
        return None

    def ack(self, job: QueuedJob) -> None:
        raise StaleJobHandleError(JobSettlement.ACK, "a sync queue holds no deliveries to settle")

    def _release(self, job: QueuedJob, delay: float) -> None:
        raise StaleJobHandleError(JobSettlement.RELEASE, "a sync queue holds no deliveries to settle")

    def fail(self, job: QueuedJob) -> None:
        raise StaleJobHandleError(JobSettlement.FAIL, "a sync queue holds no deliveries to settle")

    def _size(self, queue: str) -> int:
        return 0

    def _withdraw(self, job_id: str) -> Withdrawal:
        """Nothing is ever stored: every job ran inside its push(), so none can be withdrawn."""
        return Withdrawal.ABSENT

    def _clear(self, queue: str) -> int:
        return 0

    def _stats(self, queue: str) -> QueueStats:
        return QueueStats(waiting=0, ready=0, delayed=0, reserved=0)

    def queue_names(self) -> list[str]:
        return []
