"""``push_on_commit()``: push from ``transaction.on_commit`` on any backend.

The hook is registered robustly: a push that fails after the commit is logged (logger
``kinetis_queue.dispatch``) and sent as ``signals.push_on_commit_failed``, and every later
on-commit hook of that transaction, the application's own included, still runs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from django.db import transaction

from kinetis_queue import connections, signals
from kinetis_queue.contracts import PreparedPush, Queue
from kinetis_queue.failed import exception_text
from kinetis_queue.job import Job, display_name
from kinetis_queue.outbox import outbox_of
from kinetis_queue.payload.envelope import dumps
from kinetis_queue.payload.redaction import scrub_for

logger = logging.getLogger("kinetis_queue.dispatch")


def push_on_commit(
    job: Job,
    delay: object = 0,
    queue: str = "default",
    max_attempts: int | None = None,
    *,
    using: str = "default",
    connection: str | None = None,
    **unique_options: Any,
) -> str:
    """Push ``job`` once the current transaction on ``using`` commits; nothing is pushed on rollback.

    Arguments are validated and the job serialized now, so a bad job fails at the call site and the
    job pushed is the one passed here, whatever happens to the object later. Outside a transaction
    the push happens at once and its error raises here. A push that fails inside the commit hook
    cannot raise to anyone (the transaction is committed): it is logged and reported through
    ``signals.push_on_commit_failed``, the job was not stored, and the transaction's other hooks run.

    ``unique_key``, ``unique_for``, ``unique_until``, ``debounce`` and ``on_duplicate`` are push()'s
    (kinetis_queue.unique): the key is taken when the job is sent, after the commit. The id returned is
    the one the job is sent under; a unique job whose key is held by then is not stored (its holder is).
    ``priority`` is push()'s too (kinetis_queue.priority), passed on the same way.
    """
    target = connections.queues.default() if connection is None else connections.queues[connection]
    prepared = target.prepare(job, delay, queue, max_attempts, **unique_options)
    push_after_commit(target, prepared, using=using)
    return prepared.id


def push_after_commit(
    target: Queue,
    prepared: PreparedPush,
    *,
    using: str,
    on_failure: Callable[[Exception], None] | None = None,
    on_sent: Callable[[str], None] | None = None,
) -> None:
    """Send a prepared push (``Queue.prepare()``) after the transaction on ``using`` commits, at once outside one.

    At once, a push error raises to the caller. From the commit hook it is reported (log and
    ``push_on_commit_failed``), then ``on_failure(exception)`` runs; neither can stop later hooks.
    ``on_sent(job_id)`` receives the id the send returned (a unique push's holder's, when its key was
    held); from the commit hook its errors are contained like ``on_failure``'s.

    A connection whose outbox (OUTBOX) is that database writes the push to the outbox now, in the
    transaction (kinetis_queue/outbox): it then commits with it, and no hook is needed.
    """
    outbox = outbox_of(target)

    def send_now() -> None:
        sent = target.send(prepared)
        if on_sent is not None:
            on_sent(sent)

    if outbox is not None and outbox.database == using and outbox.captures():
        send_now()
        return
    if not transaction.get_connection(using).in_atomic_block:
        # Django runs the hook at once here (or refuses outside autocommit): errors reach the caller.
        transaction.on_commit(send_now, using=using)
        return
    # A copy of the arguments, so changes to the job's lists or dicts before the commit are not pushed.
    envelope = replace(prepared.envelope, args=json.loads(dumps(prepared.envelope.args)))
    prepared = replace(prepared, envelope=envelope)

    def hook() -> None:
        try:
            sent = target.send(prepared)
        except Exception as exc:
            _report(target, prepared, exc)
            if on_failure is not None:
                try:
                    on_failure(exc)
                except Exception as nested:
                    _log(
                        "The failure handler of the push of job %s raised %s (contained)",
                        prepared.id,
                        type(nested).__name__,
                    )
            return
        if on_sent is not None:
            try:
                on_sent(sent)
            except Exception as nested:
                _log("The handler of the sent push of job %s raised %s (contained)", prepared.id, type(nested).__name__)

    transaction.on_commit(hook, using=using, robust=True)


def _report(target: Queue, prepared: PreparedPush, exc: Exception) -> None:
    """Log and signal a push that failed after its transaction committed (never argument values)."""

    envelope, queue = prepared.envelope, prepared.queue
    # exception_text() never raises (a broken __str__ becomes a note); the arguments are plain JSON here.
    message = scrub_for(envelope.job_class, envelope.args, exception_text(exc))
    _log(
        'The push of job %s ("%s") to queue %r on connection %r after the commit failed; the job was not '
        "stored: %s: %s",
        envelope.id,
        display_name(envelope.job_class, envelope.args),
        queue,
        target.connection,
        type(exc).__name__,
        message,
    )
    if not signals.push_on_commit_failed.receivers:
        return
    responses = signals.push_on_commit_failed.send_robust(
        type(target),
        job_id=envelope.id,
        job_class=envelope.job_class,
        queue=queue,
        connection=target.connection,
        exception=exc,
    )
    for receiver, response in responses:
        if isinstance(response, Exception):
            _log("Signal receiver %r raised %s (contained)", receiver, type(response).__name__)


def _log(message: str, *args: object) -> None:
    try:
        logger.error(message, *args)
    except Exception:  # noqa: S110  # a broken logging setup must not stop the other hooks
        pass
