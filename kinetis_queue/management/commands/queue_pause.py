"""``manage.py queue_pause QUEUE`` (or ``--all``): the connection's workers stop taking the queue's jobs (every
queue's, with ``--all``, new ones included); pushes still succeed."""

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
        "jobs finish); pushes still succeed. --all pauses every queue of the connection, those first pushed to "
        "while it holds included. Idempotent: pausing a paused queue changes nothing. queue_resume undoes it."
    )
    #: True for queue_resume.
    resuming = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queue", type=queue_name, metavar="QUEUE", nargs="?", help="the queue name")
        every = "every pause of the connection" if self.resuming else "every queue of the connection, new ones too"
        parser.add_argument("--all", action="store_true", help=f"{every} (in place of QUEUE)")
        parser.add_argument("--connection", type=connection_name, help="its connection (default: the default)")

    def handle(self, *args: Any, **options: Any) -> None:
        if (options["queue"] is None) == (not options["all"]):
            raise CommandError("the following arguments are required: QUEUE, or --all (not both)")
        if options["all"]:
            self._all(options["connection"])
            return
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

    def _all(self, connection: str | None) -> None:
        try:
            name = control.connection_name(connection, pausing=True)
            tables.require_models(PausedQueue)
            changed = (control.resume if self.resuming else control.pause)(control.ALL_QUEUES, name)
        except KinetisQueueError as exc:
            raise CommandError(str(exc)) from exc
        if self.resuming:
            self.stdout.write(
                f"Every queue of connection {name!r} resumed: its workers take every queue's jobs again within "
                "about a second."
                if changed
                else f"No queue of connection {name!r} was paused: nothing changed."
            )
        else:
            self.stdout.write(
                f"Every queue of connection {name!r} paused, new ones included: its workers take no job from about "
                "a second on; pushes still succeed. queue_resume --all undoes it."
                if changed
                else f"Every queue of connection {name!r} was paused already: nothing changed."
            )
