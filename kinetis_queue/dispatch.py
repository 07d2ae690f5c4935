"""``push_on_commit()``: push from ``transaction.on_commit`` on any backend."""

from __future__ import annotations

import json
from dataclasses import replace

from django.db import transaction

from kinetis_queue import connections
from kinetis_queue.envelope import dumps
from kinetis_queue.job import Job


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
    target = connections.queues.default() if connection is None else connections.queues[connection]
    envelope, seconds = target.prepare(job, delay, queue, max_attempts)
    # A copy of the arguments, so changes to the job's lists or dicts before the commit are not pushed.
    envelope = replace(envelope, args=json.loads(dumps(envelope.args)))
    transaction.on_commit(lambda: target._push(envelope, seconds, queue), using=using)
    return envelope.id
