"""``manage.py queue_dev``: ``runserver`` and one reloading worker together, for development (docs/development.md).

One command in one terminal: the server as ``runserver`` runs it (its reloader, its checks, the
staticfiles override when installed) and beside it ``queue_work --reload`` on the chosen connection,
started once, in a process group of its own, and stopped (SIGTERM, its running job finishing) when the
server stops. A sync connection needs no worker (its jobs run inside push) and is refused. Production
runs ``queue_work`` under a process manager instead.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import Any

from django.core.management import call_command
from django.core.management.base import CommandError, CommandParser
from django.utils import autoreload

from kinetis_queue import conf
from kinetis_queue.exceptions import KinetisQueueError
from kinetis_queue.management.commands._arguments import connection_name, queue_list
from kinetis_queue.management.commands._output import QueueCommand

#: Seconds the worker has to finish its running job once the server stopped, before it is killed.
STOP_WAIT = 30


class Command(QueueCommand):
    help = (
        "Development: runserver plus one worker (queue_work --reload) on a queue connection; "
        "Ctrl-C stops both. Not for production."
    )
    requires_system_checks: list[str] = []  # runserver runs them, as usual

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("addrport", nargs="?", help="optional port number, or ipaddr:port (as runserver)")
        parser.add_argument("--connection", type=connection_name, help="connection name (default: DEFAULT_CONNECTION)")
        parser.add_argument(
            "--queue", type=queue_list, default=("default",), help="queues the worker watches: --queue high,default"
        )
        parser.add_argument(
            "--noreload",
            action="store_false",
            dest="use_reloader",
            help="neither the server nor the worker restarts when code changes",
        )
        parser.add_argument("--ipv6", "-6", action="store_true", dest="use_ipv6", help="as runserver's --ipv6")

    def handle(self, *args: Any, **options: Any) -> None:
        if autoreload.DJANGO_AUTORELOAD_ENV in os.environ:  # runserver's reloading child: the worker runs already
            self._runserver(options)
            return
        try:
            settings = conf.connection_settings(options["connection"])
        except KinetisQueueError as exc:
            raise CommandError(str(exc)) from exc
        if settings.backend == "sync":
            raise CommandError(
                f"connection {settings.name!r} is a sync connection: its jobs run inside push(), so it needs "
                "no worker; pick a connection with a store (--connection) or run runserver alone"
            )
        worker = subprocess.Popen(  # noqa: S603  (this same program, running queue_work)
            self._worker_command(settings.name, options),
            env={k: v for k, v in os.environ.items() if k != autoreload.DJANGO_AUTORELOAD_ENV},
            close_fds=False,
            process_group=0,  # a terminal's Ctrl-C reaches only the server; the worker is stopped once, below
        )
        # As Django's reloader does: SIGTERM becomes SystemExit, so the worker is stopped below (with --noreload too).
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
        try:
            self._runserver(options)
        finally:
            _stop(worker)

    def _runserver(self, options: dict[str, Any]) -> None:
        extra = [options["addrport"]] if options["addrport"] else []
        call_command(
            "runserver",
            *extra,
            use_reloader=options["use_reloader"],
            use_ipv6=options["use_ipv6"],
            verbosity=options["verbosity"],
        )

    def _worker_command(self, connection: str, options: dict[str, Any]) -> list[str]:
        """This program's command line (as Django's reloader rebuilds it) with queue_work in place of queue_dev."""
        head = autoreload.get_child_arguments()
        head = head[: head.index("queue_dev")] if "queue_dev" in head else head[:-1]
        command = [*head, "queue_work", f"--connection={connection}", f"--queue={','.join(options['queue'])}"]
        if options["use_reloader"]:
            command.append("--reload")
        command.append(f"--verbosity={options['verbosity']}")
        for name in ("settings", "pythonpath"):
            if options.get(name):
                command.append(f"--{name}={options[name]}")
        return command


def _stop(worker: subprocess.Popen[bytes]) -> None:
    """SIGTERM the worker (its running job finishes and is settled), then wait; kill it after STOP_WAIT."""
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(timeout=STOP_WAIT)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()
