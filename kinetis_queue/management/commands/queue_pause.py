"""``manage.py queue_pause QUEUE``: the connection's workers stop taking the queue's jobs (pushes still succeed)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from kinetis_queue import control
from kinetis_queue.control.models import PausedQueue
from kinetis_queue.db import tables
from kinetis_queue.exceptions import KinetisQueueError
from kinetis_queue.management.commands._arguments import connection_name, queue_name
from kinetis_queue.management.commands._output import QueueCommand


class Command(QueueCommand):
    help = (
        "Pause a queue: every worker of the connection stops taking its jobs within about a second (running "
        "jobs finish); pushes still succeed. Idempotent: pausing a paused queue changes nothing. "
        "queue_resume undoes it."
    )
    #: True for queue_resume.
    resuming = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queue", type=queue_name, metavar="QUEUE", help="the queue name")
        parser.add_argument("--connection", type=connection_name, help="its connection (default: the default)")

    def handle(self, *args: Any, **options: Any) -> None:
        queue: str = options["queue"]
        try:
            name = control.connection_name(options["connection"], pausing=True)
            tables.require_models(PausedQueue)
            changed = (control.resume if self.resuming else control.pause)(queue, name)
        except KinetisQueueError as exc:
            raise CommandError(str(exc)) from exc
        where = f"Queue {queue!r} of connection {name!r}"
        if self.resuming:
            self.stdout.write(
                f"{where} resumed: its workers take its jobs again within about a second."
                if changed
                else f"{where} was not paused: nothing changed."
            )
        else:
            self.stdout.write(
                f"{where} paused: its workers take none of its jobs from about a second on; pushes still succeed."
                if changed
                else f"{where} was paused already: nothing changed."
            )
