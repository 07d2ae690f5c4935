"""``manage.py queue_workers``: the worker registry: every worker process, what it watches and runs, whether alive."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.core.management.base import CommandError, CommandParser

from kinetis_queue import conf
from kinetis_queue.exceptions import KinetisQueueError
from kinetis_queue.management.commands._arguments import connection_name
from kinetis_queue.management.commands._output import QueueCommand
from kinetis_queue.management.commands._tables import table
from kinetis_queue.observability import status
from kinetis_queue.observability.registry import GONE_AFTER, database_clock, ready_jobs, workers


def _age(seconds: float) -> str:
    return f"{seconds:.0f}s ago" if seconds < 120 else f"{seconds / 60:.0f}m ago"


class Command(QueueCommand):
    help = (
        "Every worker process that reported to the registry: host, pid, connection, queues, concurrency, "
        f"started, last seen, state (alive; busy: every slot runs a job; gone after {GONE_AFTER:g}s unseen; "
        "stalled: a free slot, yet took no job for a minute while its queues, not paused, hold ready jobs), "
        "running jobs, processed and failed counts."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--connection", type=connection_name, help="one connection (default: all)")
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["connection"]:
                conf.connection_settings(options["connection"])
            figures = status.collect(options["connection"])
        except KinetisQueueError as exc:
            raise CommandError(str(exc)) from exc
        found = workers(options["connection"], ready=ready_jobs(figures))
        if options["json"]:
            self.stdout.write(json.dumps({"workers": [w.as_dict() for w in found]}, indent=2))
            return
        if not found:
            self.stdout.write("No worker has reported (queue_work registers every process it runs).")
            return
        now = database_clock()  # the clock the registry's times are on
        rows = [
            (
                "HOST",
                "PID",
                "CONNECTION",
                "QUEUES",
                "CONC",
                "STARTED",
                "LAST SEEN",
                "STATE",
                "RUNNING",
                "DONE",
                "FAILED",
            )
        ]
        for w in found:
            started = datetime.fromtimestamp(w.started_at).strftime("%Y-%m-%d %H:%M:%S")
            running = ", ".join(job["job"] for job in w.running) or "-"
            rows.append(
                (
                    w.host,
                    str(w.pid),
                    w.connection,
                    ",".join(w.queues),
                    str(w.concurrency),
                    started,
                    _age(now - w.last_seen),
                    w.state,
                    running,
                    str(w.processed),
                    str(w.failed),
                )
            )
        for text in table(rows):
            self.stdout.write(text)
