"""``manage.py queue_cancel JOB_ID``: cancel one job (kinetis_queue.control.cancel), saying what became of it."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from kinetis_queue import conf
from kinetis_queue.connections import backend_class
from kinetis_queue.control import Withdrawal, cancel_job
from kinetis_queue.control.models import Cancellation
from kinetis_queue.db import tables
from kinetis_queue.exceptions import KinetisQueueError
from kinetis_queue.management.commands._arguments import connection_name, job_id
from kinetis_queue.management.commands._output import QueueCommand


class Command(QueueCommand):
    help = (
        "Cancel a job: removed if it waits in an SQL store; otherwise recorded, so that the worker that "
        "meets it skips it and a running one sees JobContext.cancelled become true within about a second. "
        "Exit status 1 when the store says it holds no such job (SQL, sync): nothing is recorded then."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("job_id", type=job_id, metavar="JOB_ID", help="the job id push() returned (32 hex digits)")
        parser.add_argument("--connection", type=connection_name, help="the job's connection (default: the default)")

    def handle(self, *args: Any, **options: Any) -> None:
        ident: str = options["job_id"]
        try:
            settings = conf.connection_settings(options["connection"])
            backend_class(settings)  # a connection whose client library is missing says so, before anything
            tables.require_models(Cancellation)
            found = cancel_job(ident, settings.name)
        except KinetisQueueError as exc:
            raise CommandError(str(exc)) from exc
        where = f"connection {settings.name!r}"
        if found is Withdrawal.ABSENT:
            raise CommandError(
                f"job {ident} is not in the store of {where}: it finished, failed for good or was never pushed "
                "there; nothing was recorded"
            )
        self.stdout.write(
            {
                Withdrawal.REMOVED: f"Job {ident} of {where} removed: it was waiting and will not run.",
                Withdrawal.HELD: (
                    f"Job {ident} of {where} cancelled: a worker holds it, and its JobContext.cancelled becomes "
                    "true within about a second; it will not be run again."
                ),
                Withdrawal.UNKNOWN: (
                    f"Job {ident} of {where} cancelled: recorded ({settings.backend} cannot look a job up by id), "
                    "so a worker skips it when it meets it, and a running one is told (JobContext.cancelled). "
                    "A job that already finished is not affected."
                ),
            }[found]
        )
