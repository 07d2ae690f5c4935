"""``push_on_commit()``: push from ``transaction.on_commit`` on any backend."""

from __future__ import annotations

from django.db import transaction

from kinetis_queue import connections
from kinetis_queue.envelope import new_envelope
from kinetis_queue.job import Job
from kinetis_queue.serializer import serialize_job
from kinetis_queue.validation import validate_delay, validate_max_attempts, validate_queue_name


def push_on_commit(
    job: Job,
    delay: object = 0,
    queue: str = "default",
    max_attempts: int | None = None,
    *,
    using: str = "default",
    connection: str | None = None,
) -> str:
    """Push ``job`` once the current transaction on ``using`` commits; nothing is pushed on rollback.

    Arguments are validated and the job serialized now, so a bad job fails at the call site and the
    job pushed is the one passed here, whatever happens to the object later. Outside a transaction
    the push happens at once. A push that fails inside the commit hook raises to the code that
    committed, after the commit: the job then was not stored.
    """
    seconds = validate_delay(delay)
    validate_queue_name(queue)
    cap = validate_max_attempts(max_attempts)
    target = connections.queues.default() if connection is None else connections.queues[connection]
    job_class, args = serialize_job(job)
    envelope = new_envelope(job_class, args, cap, target._metadata())
    transaction.on_commit(lambda: target._push(envelope, seconds, queue), using=using)
    return envelope.id
