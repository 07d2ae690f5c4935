"""``manage.py queue_work``: run a worker on one connection."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kinetis_queue import conf, connections
from kinetis_queue.contracts import DisposableQueue
from kinetis_queue.exceptions import InvalidQueueArgumentError, KinetisQueueError
from kinetis_queue.validation import validate_connection_name, validate_queue_list
from kinetis_queue.worker import MAX_RETRY_DELAY, Worker


def _queue_list(value: str) -> tuple[str, ...]:
    try:
        return validate_queue_list([name.strip() for name in value.split(",")])
    except InvalidQueueArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _connection(value: str) -> str:
    try:
        return validate_connection_name(value, "--connection")
    except InvalidQueueArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a number of seconds") from None
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return number


def _attempts(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError("must be an int of 0 or more")
    return int(value)


def _backoff(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a number of seconds") from None
    if not 0 <= number <= MAX_RETRY_DELAY:
        raise argparse.ArgumentTypeError(f"must be from 0 to {MAX_RETRY_DELAY} seconds")
    return number


class Command(BaseCommand):
    help = "Process jobs from a queue connection until stopped (SIGTERM/SIGINT stop between jobs)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--connection", type=_connection, help="connection name (default: DEFAULT_CONNECTION)")
        parser.add_argument("--queue", type=_queue_list, default=("default",),
                            help="queues to watch, highest priority first: --queue high,default")
        parser.add_argument("--sleep", type=_positive, default=None,
                            help="seconds each pop() looks for work before the loop checks for a stop "
                                 "(default: POLL_TIMEOUT)")
        parser.add_argument("--tries", type=_attempts, default=None,
                            help="attempts for a job pushed without max_attempts (default: MAX_ATTEMPTS)")
        parser.add_argument("--backoff", type=_backoff, default=None,
                            help="retry base delay in seconds, 0..900 (default: RETRY_BASE_DELAY)")
        parser.add_argument("--once", action="store_true", help="process at most one job, then exit")
        parser.add_argument("--stop-when-empty", action="store_true",
                            help="exit once a pop() finds no job within --sleep")

    def handle(self, *args: Any, **options: Any) -> None:
        # Everything is validated before anything is printed or touched.
        try:
            settings = conf.connection_settings(options["connection"])
        except KinetisQueueError as exc:
            raise CommandError(str(exc)) from exc
        timeout = options["sleep"] if options["sleep"] is not None else settings.poll_timeout
        tries = options["tries"] if options["tries"] is not None else settings.max_attempts
        backoff = options["backoff"] if options["backoff"] is not None else settings.retry_base_delay
        queues: tuple[str, ...] = options["queue"]
        try:
            queue = connections.build(settings.name)
        except KinetisQueueError as exc:
            raise CommandError(str(exc)) from exc
        worker = Worker(queue, connection=options["connection"], default_max_attempts=tries,
                        retry_base_delay=backoff)
        handler = self._attach_log_handler(options["verbosity"])
        try:
            if options["verbosity"] >= 1:
                self.stdout.write(
                    f"Worker on connection {settings.name!r} ({settings.backend}) watching "
                    f"{', '.join(queues)}; stop with Ctrl-C or SIGTERM."
                )
            if options["once"]:
                worker.process_next(timeout, queues)
            else:
                worker.run(timeout, queues, stop_when_empty=options["stop_when_empty"])
            if options["verbosity"] >= 1:
                self.stdout.write(f"Worker stopped after {worker.processed} job(s).")
        finally:
            worker.close()
            if isinstance(queue, DisposableQueue):
                queue.dispose()
            if handler is not None:
                logging.getLogger("kinetis_queue").removeHandler(handler)

    def _attach_log_handler(self, verbosity: int) -> logging.Handler | None:
        """Show the worker's log lines on stderr unless the project configured logging for them."""
        package_logger = logging.getLogger("kinetis_queue")
        if verbosity < 1 or package_logger.handlers:
            return None
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        package_logger.addHandler(handler)
        package_logger.setLevel(logging.INFO if verbosity >= 2 else logging.WARNING)
        return handler
