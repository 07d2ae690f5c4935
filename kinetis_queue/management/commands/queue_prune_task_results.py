"""``manage.py queue_prune_task_results``: delete finished django.tasks results older than a cut-off."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import CommandParser

from kinetis_queue.contrib.tasks.results import TaskResultRecord, prune
from kinetis_queue.db import tables
from kinetis_queue.management.commands._output import QueueCommand


def _hours(value: str) -> float:
    try:
        hours = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a number of hours") from None
    if not 0 <= hours < float("inf"):
        raise argparse.ArgumentTypeError("must be 0 or more hours")
    return hours


class Command(QueueCommand):
    help = "Delete SUCCESSFUL and FAILED task results that finished more than --hours ago (default 336, 14 days)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--hours", type=_hours, default=336.0, help="age cut-off in hours (default 336)")

    def handle(self, *args: Any, **options: Any) -> None:
        tables.command_requires(TaskResultRecord)
        removed = prune(options["hours"])
        self.stdout.write(f"Deleted {removed} finished task result(s).")
