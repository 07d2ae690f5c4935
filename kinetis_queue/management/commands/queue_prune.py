"""``manage.py queue_prune --hours N``: delete failed-job records and cancellations strictly older than N
hours, the unique-job locks, concurrency slots and rate-limit rows nothing holds any more, and the chains and
batches that ended more than N hours ago."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from kinetis_queue import control, failed
from kinetis_queue.db import tables
from kinetis_queue.limits import database as limits_database
from kinetis_queue.management.commands._arguments import positive_number
from kinetis_queue.management.commands._output import QueueCommand
from kinetis_queue.models import Cancellation, FailedJob
from kinetis_queue.ratelimits import database as rates_database
from kinetis_queue.unique import database as unique_database
from kinetis_queue.workflows import engine as workflow_engine


class Command(QueueCommand):
    help = (
        f"Delete failed-job records and cancellations strictly older than --hours (default "
        f"{failed.DEFAULT_PRUNE_HOURS}: a week), unique-job locks past their expiry, concurrency slots free "
        "for a day and rate-limit rows idle for a day. A job still waiting on Redis, SQS or RabbitMQ whose "
        "cancellation is pruned runs when a worker started afterwards meets it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--hours", type=positive_number, default=failed.DEFAULT_PRUNE_HOURS, help="age in hours, a positive number"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        tables.command_requires(FailedJob, Cancellation)
        hours: float = options["hours"]
        removed = failed.prune(hours)
        self.stdout.write(f"Pruned {removed} failed job(s) older than {hours:g} hour(s).")
        self.stdout.write(f"Pruned {control.prune(hours)} cancellation(s) older than {hours:g} hour(s).")
        locks, slots = unique_database.prune(), limits_database.prune()
        self.stdout.write(f"Pruned {locks} expired unique-job lock(s) and {slots} idle concurrency slot(s).")
        self.stdout.write(f"Pruned {rates_database.prune()} rate-limit row(s) idle for a day.")
        trees = workflow_engine.prune(hours)
        self.stdout.write(f"Pruned {trees} chain(s) and batch(es) that ended more than {hours:g} hour(s) ago.")
