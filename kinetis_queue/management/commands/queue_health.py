"""``manage.py queue_health``: exit 0 when each connection's store answers and a worker of it was seen recently."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError, CommandParser

from kinetis_queue import conf
from kinetis_queue.exceptions import KinetisQueueError
from kinetis_queue.management.commands._arguments import connection_name
from kinetis_queue.management.commands._output import QueueCommand
from kinetis_queue.observability.health import check


class Command(QueueCommand):
    help = (
        "Exit 0 when the connection's store answers and one of its workers was seen in the last 15 seconds "
        "(and none is stalled); 1 otherwise, saying why. For probes and monitoring."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--connection", type=connection_name, help="one connection (default: all)")
        parser.add_argument("--no-workers", action="store_true", help="check the store only (a web-tier probe)")
        parser.add_argument("--json", action="store_true", help="print JSON")

    def handle(self, *args: Any, **options: Any) -> None:
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
