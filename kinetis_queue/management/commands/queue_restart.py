"""``manage.py queue_restart``: ask every worker of a connection (or of all) to exit after its current job."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from kinetis_queue import conf, connections
from kinetis_queue.contracts import DisposableQueue, Queue
from kinetis_queue.db import tables
from kinetis_queue.exceptions import KinetisQueueError
from kinetis_queue.management.commands._arguments import connection_name
from kinetis_queue.management.commands._output import QueueCommand
from kinetis_queue.worker.restart import DatabaseRestartMarker, has_own_marker


class Command(QueueCommand):
    help = (
        "Move the restart generation of a connection (default: every configured connection). Each of its "
        "workers, on any host, exits after its current job; a supervisor then starts one with the new code. "
        "Exit status 1 if a connection's generation could not be moved."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--connection", type=connection_name, help="only this connection's workers")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["connection"]:
                chosen = [conf.connection_settings(options["connection"])]
                connections.backend_class(chosen[0])  # a named connection must be usable: checked first
            else:
                chosen = list(conf.load().connections.values())
        except KinetisQueueError as exc:
            raise CommandError(str(exc)) from exc
        failed = []
        for settings in chosen:
            try:
                generation = self._bump(settings)
            except KinetisQueueError as exc:
                # Its workers cannot run here either (a missing client library, say); the others restart.
                failed.append(settings.name)
                self.stderr.write(f"Restart not requested for connection {settings.name!r}: {exc}")
                continue
            self.stdout.write(
                f"Restart requested for connection {settings.name!r} (generation {generation}): "
                "its workers exit after their current job."
            )
        if failed:
            raise CommandError(f"restart not requested for connection(s) {', '.join(failed)}")

    @staticmethod
    def _bump(settings: conf.ConnectionSettings) -> int:
        cls = connections.backend_class(settings)
        if not has_own_marker(cls):
            from kinetis_queue.models import RestartMarker

            tables.require_models(RestartMarker)  # a forgotten migrate, said as such
            return DatabaseRestartMarker(settings.name).bump()
        queue: Queue = cls.from_settings(settings)
        try:
            return int(queue.restart_marker().bump())  # type: ignore[attr-defined]
        finally:
            if isinstance(queue, DisposableQueue):
                queue.dispose()
