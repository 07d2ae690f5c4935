"""``manage.py queue_failed``: the newest failed-job records, as safe metadata only."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from kinetis_queue import failed
from kinetis_queue.db import tables
from kinetis_queue.management.commands._arguments import connection_name, queue_name
from kinetis_queue.management.commands._output import QueueCommand
from kinetis_queue.management.commands._tables import table


class Command(QueueCommand):
    help = (
        f"List the newest failed jobs (at most {failed.MAX_LISTED}): id, time, connection, queue, class (a task's "
        "or queued receiver's own name), "
        "exception class and attempts. Never the arguments or the exception message."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--connection", type=connection_name, help="only records of this worker --connection name")
        parser.add_argument("--queue", type=queue_name, help="only records of this queue")

    def handle(self, *args: Any, **options: Any) -> None:
        from kinetis_queue.models import FailedJob

        tables.command_requires(FailedJob)  # a forgotten migrate, said as such
        rows = failed.list_failed(connection=options["connection"], queue=options["queue"])
        if not rows:
            self.stdout.write("No failed jobs.")
            return
        cells = [("ID", "FAILED AT", "CONNECTION", "QUEUE", "CLASS", "EXCEPTION", "ATTEMPTS")]
        for row in rows:
            attempts = f"{row.attempts}/{row.max_attempts}" if row.max_attempts is not None else str(row.attempts)
            cells.append(
                (
                    str(row.id),
                    row.failed_at.strftime("%Y-%m-%d %H:%M:%S"),
                    row.connection or "(default)",
                    row.queue,
                    row.name or row.job_class,
                    row.exception_class.rpartition(".")[2],
                    attempts,
                )
            )
        for text in table(cells):
            self.stdout.write(text)
        if len(rows) == failed.MAX_LISTED:
            self.stdout.write(f"(the newest {failed.MAX_LISTED} shown; filter with --connection or --queue)")
