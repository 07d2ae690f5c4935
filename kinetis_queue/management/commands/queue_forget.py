"""``manage.py queue_forget ID``: delete one failed-job record."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from kinetis_queue import failed
from kinetis_queue.db import tables
from kinetis_queue.management.commands._arguments import record_id
from kinetis_queue.management.commands._output import QueueCommand


class Command(QueueCommand):
    help = "Delete one failed-job record (the job is not pushed again)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("id", type=record_id, metavar="ID", help="the failed-job id (queue_failed)")

    def handle(self, *args: Any, **options: Any) -> None:
        from kinetis_queue.models import FailedJob

        tables.command_requires(FailedJob)
        if not failed.forget(options["id"]):
            raise CommandError(f"there is no failed job with id {options['id']}")
        self.stdout.write(f"Failed job {options['id']} forgotten.")
