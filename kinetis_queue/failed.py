"""Failed jobs: the record the worker writes before fail(), and the operations on those records."""

from __future__ import annotations

from typing import Protocol

from kinetis_queue.contracts import QueuedJob
from kinetis_queue.envelope import dumps


class FailedJobRecorder(Protocol):
    """Writes a durable record of a job the worker gives up on; returns the record's id."""

    def record(self, job: QueuedJob, exception: BaseException, connection: str | None) -> int | str | None: ...


class ModelRecorder:
    """Records into the FailedJob model (table kinetis_queue_failed_jobs), whatever the backend."""

    def record(self, job: QueuedJob, exception: BaseException, connection: str | None) -> int:
        from kinetis_queue.models import FailedJob

        record = FailedJob.objects.create(
            connection=connection,
            queue=job.queue,
            job_id=job.id,
            job_class=job.job_class,
            args=dumps(job.args),
            metadata=dumps(job.metadata),
            max_attempts=job.max_attempts,
            attempts=job.attempts,
            exception_class=f"{type(exception).__module__}.{type(exception).__qualname__}",
            exception_message=str(exception),
        )
        return record.pk
