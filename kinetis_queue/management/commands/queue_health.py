"""``manage.py queue_health``: exit 0 when each connection's store answers and a worker of it was seen recently;
with ``--self``, when this container's worker is alive by its heartbeat file alone (a liveness probe)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, CommandParser

from kinetis_queue import conf
from kinetis_queue.exceptions import KinetisQueueError
from kinetis_queue.management.commands._arguments import connection_name, positive_number
from kinetis_queue.management.commands._output import QueueCommand
from kinetis_queue.observability.health import check
from kinetis_queue.observability.liveness import DEFAULT_MAX_AGE, heartbeat_problem


class Command(QueueCommand):
    help = (
        "Exit 0 when the connection's store answers and one of its workers was seen in the last 15 seconds "
        "(and none is stalled); 1 otherwise, saying why: for readiness and alerting. With --self "
        "--heartbeat-file PATH: exit 0 when the worker that writes PATH (queue_work --heartbeat-file) is alive, "
        "asking neither the store nor the other workers: for a liveness probe."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--connection", type=connection_name, help="one connection (default: all)")
        parser.add_argument("--no-workers", action="store_true", help="check the store only (a web-tier probe)")
        parser.add_argument("--json", action="store_true", help="print JSON")
        parser.add_argument(
            "--self",
            action="store_true",
            dest="self_check",
            help="check only this container's worker, by the modification time of its --heartbeat-file",
        )
        parser.add_argument(
            "--heartbeat-file", type=Path, default=None, help="with --self: the file the worker touches"
        )
        parser.add_argument(
            "--max-age",
            type=positive_number,
            default=None,
            help=f"with --self: the oldest heartbeat that passes, in seconds (default {DEFAULT_MAX_AGE:g})",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["self_check"]:
            self._check_self(options)
            return
        if options["heartbeat_file"] is not None or options["max_age"] is not None:
            raise CommandError("--heartbeat-file and --max-age go with --self")
        try:
            if options["connection"]:
                conf.connection_settings(options["connection"])
            result = check(options["connection"], require_worker=not options["no_workers"])
        except KinetisQueueError as exc:
            raise CommandError(str(exc)) from exc
        if options["json"]:
            self.stdout.write(json.dumps(result.as_dict(), indent=2))
        else:
            for c in result.connections:
                if c.healthy:
                    self.stdout.write(f"{c.connection}: ok ({c.workers} worker(s))")
                else:
                    self.stdout.write(f"{c.connection}: failing: {'; '.join(c.problems)}")
        if not result.healthy:
            raise CommandError("unhealthy: " + ", ".join(c.connection for c in result.connections if not c.healthy))

    def _check_self(self, options: dict[str, Any]) -> None:
        """The liveness check: the heartbeat file's age, and nothing else (no store, no database)."""
        if options["connection"] or options["no_workers"]:
            raise CommandError(
                "--self checks this worker's heartbeat file only: leave out --connection and --no-workers"
            )
        path: Path | None = options["heartbeat_file"]
        if path is None:
            raise CommandError("--self needs --heartbeat-file PATH: the file given to queue_work --heartbeat-file")
        max_age = options["max_age"] if options["max_age"] is not None else DEFAULT_MAX_AGE
        problem = heartbeat_problem(path, max_age)
        if options["json"]:
            self.stdout.write(json.dumps({"status": "ok" if problem is None else "failing", "problem": problem}))
        else:
            self.stdout.write("self: ok (the heartbeat is fresh)" if problem is None else f"self: failing: {problem}")
        if problem is not None:
            raise CommandError("unhealthy: this worker")
