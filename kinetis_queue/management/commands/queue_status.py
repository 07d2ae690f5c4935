"""``manage.py queue_status``: ready, delayed, reserved and failed counts per connection and queue."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kinetis_queue import conf, status
from kinetis_queue.exceptions import KinetisQueueError, QueueTablesMissingError
from kinetis_queue.management.commands._arguments import connection_name, queue_list


def _cell(value: int | None, approximate: bool) -> str:
    if value is None:
        return "-"
    return f"~{value}" if approximate else str(value)


class Command(BaseCommand):
    help = (
        "A point-in-time snapshot per queue: ready (an expired reservation counts: the next pop takes it), "
        "delayed, reserved (live reservations), waiting (size()) and failed records. '-' means the backend "
        "cannot tell, '~' an estimate. Payloads are never read."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--connection", type=connection_name, help="one connection (default: all)")
        parser.add_argument(
            "--queue",
            type=queue_list,
            default=None,
            help="queues to show: a,b (default: every queue the backend can list)",
        )
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["connection"]:
                conf.connection_settings(options["connection"])
            else:
                conf.load()
        except KinetisQueueError as exc:
            raise CommandError(str(exc)) from exc
        try:
            figures = status.collect(options["connection"], options["queue"])
        except QueueTablesMissingError as exc:
            raise CommandError(str(exc)) from exc
        if options["json"]:
            self.stdout.write(json.dumps({"connections": [f.as_dict() for f in figures]}, indent=2))
        else:
            self._table(figures)
        broken = [f.connection for f in figures if f.error is not None]
        if broken:
            raise CommandError(f"figures unavailable for connection(s) {', '.join(broken)}")

    def _table(self, figures: list[status.ConnectionFigures]) -> None:
        rows = [("CONNECTION", "BACKEND", "QUEUE", "READY", "DELAYED", "RESERVED", "WAITING", "FAILED")]
        for connection in figures:
            if connection.error is not None:
                rows.append((connection.connection, connection.backend, "(unavailable)", "", "", "", "", ""))
                continue
            for q in connection.queues:
                s, approx = q.stats, q.stats.approximate
                rows.append(
                    (
                        connection.connection,
                        connection.backend,
                        q.queue,
                        _cell(s.ready, approx),
                        _cell(s.delayed, approx),
                        _cell(s.reserved, approx),
                        _cell(s.waiting, approx),
                        str(q.failed),
                    )
                )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        numeric = range(3, len(widths))
        for row in rows:
            pairs = enumerate(zip(row, widths, strict=True))
            cells = [cell.rjust(w) if i in numeric else cell.ljust(w) for i, (cell, w) in pairs]
            self.stdout.write("  ".join(cells).rstrip())
        for connection in figures:
            if connection.error is not None:
                self.stderr.write(f"{connection.connection}: {connection.error}")
