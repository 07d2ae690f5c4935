"""``manage.py queue_retry ID...``: push failed jobs again, attempts reset, and remove their records."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from kinetis_queue import failed
from kinetis_queue.db import tables
from kinetis_queue.management.commands._arguments import record_id
from kinetis_queue.management.commands._output import QueueCommand


class Command(QueueCommand):
    help = (
        "Push each failed job again to its connection and queue with attempts reset, after checking its "
        "stored class and arguments against the current code; its record is removed once the push "
        "succeeded. A job that cannot be pushed keeps its record. Exit status 1 if any was not retried."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("ids", nargs="+", type=record_id, metavar="ID", help="failed-job ids (queue_failed)")

    def handle(self, *args: Any, **options: Any) -> None:
        from kinetis_queue.models import FailedJob

        tables.command_requires(FailedJob)
        ids: list[int] = list(dict.fromkeys(options["ids"]))
        refused = 0
        for record_id_ in ids:
            outcome = failed.retry(record_id_)
            if outcome.ok:
                self.stdout.write(f"Failed job {record_id_} pushed again as job {outcome.job_id}.")
            else:
                refused += 1
                self.stderr.write(f"Failed job {record_id_} was not retried: {outcome.error}")
        if refused:
            raise CommandError(f"{refused} of {len(ids)} failed job(s) not retried")
