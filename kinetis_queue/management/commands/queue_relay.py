"""``manage.py queue_relay``: relay the transactional outbox of one connection, or of every connection with OUTBOX.

Every ``queue_work`` of such a connection relays too (unless ``--no-relay``); this command is for those
who want relays of their own. Any number may run: each queue is sent by one relay at a time, in order.
SIGTERM or SIGINT stops it after the round in flight.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from django.core.management.base import CommandError, CommandParser

from kinetis_queue import conf, connections
from kinetis_queue.contracts import DisposableQueue, Queue
from kinetis_queue.exceptions import KinetisQueueError
from kinetis_queue.management.commands._arguments import connection_name
from kinetis_queue.management.commands._output import QueueCommand
from kinetis_queue.outbox.relay import Relay
from kinetis_queue.worker.background import BackgroundLoop


class Command(QueueCommand):
    help = (
        "Move committed outbox rows (OUTBOX) to their store, until SIGTERM/SIGINT; --once relays what waits "
        "now and exits. Without --connection: every connection that has an outbox."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--connection", type=connection_name, help="the connection (default: every one with OUTBOX)"
        )
        parser.add_argument("--once", action="store_true", help="relay what is committed now, then exit")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            chosen = self._connections(options["connection"])
        except KinetisQueueError as exc:
            raise CommandError(str(exc)) from exc
        queues: list[Queue] = []
        try:
            relays = []
            for settings in chosen:
                queue = connections.build(settings.name)
                queues.append(queue)
                assert settings.outbox is not None  # chosen for it
                relays.append(Relay(queue, settings.outbox))
            if options["once"]:
                for relay in relays:
                    sent = relay.relay_once()
                    self.stdout.write(f"Relayed {sent} job(s) of connection {relay.connection!r}.")
                    if relay.refused:
                        self.stdout.write(
                            f"{relay.refused} job(s) refused for good by the store: recorded as failed jobs "
                            "(queue_failed) and removed from the outbox."
                        )
                    if relay.failing:
                        names = ", ".join(repr(name) for name in relay.failing)
                        self.stderr.write(
                            f"Not sent (the store failed; the rows stay in the outbox): queue(s) {names}."
                        )
                return
            self._run(relays, int(options["verbosity"]))
        finally:
            for queue in queues:
                if isinstance(queue, DisposableQueue):
                    queue.dispose()

    @staticmethod
    def _connections(name: str | None) -> list[conf.ConnectionSettings]:
        loaded = conf.load()
        if name is not None:
            settings = conf.connection_settings(name)
            if settings.outbox is None:
                raise CommandError(
                    f"connection {name!r} has no outbox (KINETIS_QUEUE['CONNECTIONS'][{name!r}]['OUTBOX'])"
                )
            return [settings]
        chosen = [settings for settings in loaded.connections.values() if settings.outbox is not None]
        if not chosen:
            raise CommandError("no connection has an outbox (OUTBOX)")
        return chosen

    def _run(self, relays: list[Relay], verbosity: int) -> None:
        stop = threading.Event()
        previous = {signum: signal.signal(signum, lambda *_: stop.set()) for signum in (signal.SIGTERM, signal.SIGINT)}
        loops = [
            BackgroundLoop(f"outbox relay of {relay.connection}", relay.step, on_stop=relay.close) for relay in relays
        ]
        if verbosity >= 1:
            names = ", ".join(repr(relay.connection) for relay in relays)
            self.stdout.write(f"Relaying the outbox of {names}; stop with Ctrl-C or SIGTERM.")
            self.stdout.flush()
        try:
            for loop in loops:
                loop.start()
            stop.wait()
        finally:
            for loop in loops:
                loop.stop()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if verbosity >= 1:
            self.stdout.write(f"Relay stopped after {sum(relay.relayed for relay in relays)} job(s).")
