"""``manage.py queue_clear``: discard every unreserved job on the given queues."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from kinetis_queue import conf, connections
from kinetis_queue.contracts import ClearableQueue, DisposableQueue
from kinetis_queue.exceptions import KinetisQueueError
from kinetis_queue.management.commands._output import QueueCommand
from kinetis_queue.management.commands.queue_work import _connection, _queue_list


class Command(QueueCommand):
    help = "Delete every waiting job (delayed ones included) on the given queues; reserved jobs are kept."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--queue", type=_queue_list, default=("default",), help="queues to clear: a,b")
        parser.add_argument("--connection", type=_connection, help="connection name (default: DEFAULT_CONNECTION)")
        parser.add_argument("--force", action="store_true", help="required: clearing cannot be undone")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            settings = conf.connection_settings(options["connection"])
            cls = connections.backend_class(settings)
        except KinetisQueueError as exc:
            raise CommandError(str(exc)) from exc
        # Contract: the capability is checked first, naming the backend and what it lacks.
        if not issubclass(cls, ClearableQueue):
            raise CommandError(
                f"connection {settings.name!r} uses the {settings.backend} backend ({cls.__name__}), "
                "which cannot clear: it is not a ClearableQueue"
            )
        queues: tuple[str, ...] = options["queue"]  # the whole list was validated by argparse
        if not options["force"]:
            raise CommandError(f"refusing to clear {', '.join(queues)} without --force")
        queue = cls.from_settings(settings)
        assert isinstance(queue, ClearableQueue)
        try:
            for name in queues:
                removed = queue.clear(name)
                self.stdout.write(f"Cleared {removed} job(s) from {name!r} on connection {settings.name!r}.")
        finally:
            if isinstance(queue, DisposableQueue):
                queue.dispose()
