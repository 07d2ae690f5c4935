"""Cancelling a job and pausing a queue (docs/cancel-and-pause.md): the public calls, on every backend.

``cancel(job_id)`` asks the connection's store to withdraw the job (``Queue.withdraw()``): the SQL
backend deletes a waiting job at once; a job a worker holds, or any job on a store that cannot look one
up by id (Redis, SQS, RabbitMQ), is recorded as a Cancellation row instead, which every worker of the
connection reads within about a second: it skips the job when it meets it, and a running one sees
``JobContext.cancelled`` become true. ``pause(queue)`` writes a PausedQueue row: the connection's
workers stop taking that queue's jobs within about a second, and take them again after ``resume()``.
``pause(ALL_QUEUES)`` (``queue_pause --all``) writes the row that pauses every queue of the connection, those
first pushed to while it holds included; ``resume(ALL_QUEUES)`` removes every pause of the connection.

The rows live in the Django database ``router.db_for_write()`` names for their model. Every argument
is checked before any I/O. The models are imported inside each call: ``kinetis_queue`` re-exports
``cancel`` and is imported before the app registry is ready.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from kinetis_queue import conf
from kinetis_queue.connections import backend_class, queues
from kinetis_queue.contracts import Withdrawal
from kinetis_queue.exceptions import InvalidQueueArgumentError, QueueUnavailableError
from kinetis_queue.validation import validate_connection_name, validate_job_id, validate_queue_name

__all__ = [
    "ALL_QUEUES",
    "Withdrawal",
    "all_paused",
    "cancel",
    "cancel_job",
    "connection_name",
    "pause",
    "paused_queues",
    "prune",
    "resume",
]

#: What a skipped delivery's log line gives as the reason (kinetis_queue.hooks.SkipDelivery).
CANCELLED: Final = "cancelled"
#: The queue name of the pause that holds every queue of a connection (``queue_pause --all``): no queue can
#: have it (kinetis_queue.validation.QUEUE_NAME).
ALL_QUEUES: Final = "*"


def cancel(job_id: str, connection: str | None = None) -> bool:
    """Cancel the job ``job_id`` of ``connection`` (default: the default connection); True if the job was
    pending or running, as far as the store can tell.

    SQL: True when a waiting job was removed, or a worker holds it (it is told: ``context.cancelled``);
    False when no such job is in the table (it finished, failed for good, or never existed). Redis, SQS
    and RabbitMQ cannot look a job up by id: always True, and the cancellation is recorded (harmless for
    a job that already finished). sync: always False (every job ran inside its push()).
    """
    return cancel_job(job_id, connection) is not Withdrawal.ABSENT


def cancel_job(job_id: str, connection: str | None = None) -> Withdrawal:
    """``cancel()``, saying what the store found (``queue_cancel`` prints it): REMOVED, HELD (recorded: the
    worker is told), UNKNOWN (recorded: a worker skips it when it meets it) or ABSENT (nothing recorded)."""
    from django.db import router

    from kinetis_queue.control.models import Cancellation

    validate_job_id(job_id)
    name = connection_name(connection)
    found = queues[name].withdraw(job_id)
    if found in (Withdrawal.HELD, Withdrawal.UNKNOWN):
        rows = Cancellation.objects.using(router.db_for_write(Cancellation))
        rows.bulk_create([Cancellation(connection=name, job_id=job_id)], ignore_conflicts=True)
    return found


def cancel_many(job_ids: Sequence[str], connection: str | None = None) -> dict[str, Withdrawal]:
    """``cancel_job()`` for several jobs of one connection (a workflow's cancel), per id, in a fixed number of
    statements whatever their count: one ``Queue.withdraw_many()``, one insert of the Cancellation rows."""
    from django.db import router

    from kinetis_queue.control.models import Cancellation

    for job_id in job_ids:
        validate_job_id(job_id)
    name = connection_name(connection)
    found = queues[name].withdraw_many(job_ids)
    told = [job_id for job_id, what in found.items() if what in (Withdrawal.HELD, Withdrawal.UNKNOWN)]
    if told:
        rows = Cancellation.objects.using(router.db_for_write(Cancellation))
        rows.bulk_create([Cancellation(connection=name, job_id=job_id) for job_id in told], ignore_conflicts=True)
    return found


def pause(queue: str, connection: str | None = None) -> bool:
    """Pause ``queue`` of ``connection``: its workers take none of its jobs from about a second on, and
    pushes still succeed. True if it was running, False if it was paused already (nothing changes).
    ``ALL_QUEUES`` pauses every queue of the connection, and any queue pushed to while it holds."""
    from django.db import router

    from kinetis_queue.control.models import PausedQueue

    if queue != ALL_QUEUES:
        validate_queue_name(queue)
    name = connection_name(connection, pausing=True)
    rows = PausedQueue.objects.using(router.db_for_write(PausedQueue))
    _, created = rows.get_or_create(connection=name, queue=queue)
    return created


def resume(queue: str, connection: str | None = None) -> bool:
    """Resume a paused ``queue`` of ``connection``: its workers take its jobs again from about a second on.
    True if it was paused, False if it was not (nothing changes). ``ALL_QUEUES`` removes every pause of the
    connection, the one of every queue and those of single queues."""
    from django.db import router

    from kinetis_queue.control.models import PausedQueue

    if queue != ALL_QUEUES:
        validate_queue_name(queue)
    name = connection_name(connection, pausing=True)
    rows = PausedQueue.objects.using(router.db_for_write(PausedQueue)).filter(connection=name)
    deleted, _ = (rows if queue == ALL_QUEUES else rows.filter(queue=queue)).delete()
    return deleted > 0


def paused_queues(connection: str | None = None) -> list[str]:
    """The paused queues of ``connection`` (default: the default connection), sorted by name."""
    from django.db import router

    from kinetis_queue.control.models import PausedQueue

    name = connection_name(connection)
    rows = PausedQueue.objects.using(router.db_for_write(PausedQueue)).filter(connection=name)
    return sorted(rows.exclude(queue=ALL_QUEUES).values_list("queue", flat=True))


def all_paused(connection: str | None = None) -> bool:
    """Whether every queue of ``connection`` is paused (``queue_pause --all``)."""
    from django.db import router

    from kinetis_queue.control.models import PausedQueue

    name = connection_name(connection)
    return (
        PausedQueue.objects.using(router.db_for_write(PausedQueue)).filter(connection=name, queue=ALL_QUEUES).exists()
    )


def prune(hours: float) -> int:
    """Delete the cancellations older than ``hours`` (``queue_prune``); how many. A job still waiting on
    Redis, SQS or RabbitMQ whose cancellation is pruned runs when a newly started worker meets it."""
    from datetime import timedelta

    from django.db import router
    from django.utils import timezone

    from kinetis_queue.control.models import Cancellation

    if type(hours) not in (int, float) or not hours > 0:
        raise InvalidQueueArgumentError("hours must be a positive number")
    cutoff = timezone.now() - timedelta(hours=hours)
    rows = Cancellation.objects.using(router.db_for_write(Cancellation))
    deleted, _ = rows.filter(cancelled_at__lt=cutoff).delete()
    return deleted


def connection_name(connection: str | None, *, pausing: bool = False) -> str:
    """The configured connection's name (None: the default one), checked with no I/O: QueueConfigurationError
    when it is not configured; with ``pausing``, InvalidQueueArgumentError for a backend that runs each job
    inside push(), which no worker serves."""
    if connection is not None:
        validate_connection_name(connection)
    settings = conf.connection_settings(connection)
    if pausing:
        try:
            inline = backend_class(settings).runs_inline
        except QueueUnavailableError:  # its client library is missing here: a store all the same
            inline = False
        if inline:
            raise InvalidQueueArgumentError(
                f"connection {settings.name!r} uses the {settings.backend} backend, which runs each job inside "
                "push(): no worker takes its jobs, so there is nothing to pause or resume"
            )
    return settings.name
