"""``manage.py queue_prune --hours N``: delete failed-job records strictly older than N hours."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from kinetis_queue import failed
from kinetis_queue.management.commands._arguments import positive_number


class Command(BaseCommand):
    help = f"Delete failed-job records strictly older than --hours (default {failed.DEFAULT_PRUNE_HOURS}: a week)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--hours", type=positive_number, default=failed.DEFAULT_PRUNE_HOURS, help="age in hours, a positive number"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        hours: float = options["hours"]
        removed = failed.prune(hours)
        self.stdout.write(f"Pruned {removed} failed job(s) older than {hours:g} hour(s).")
