"""``manage.py queue_schedule``: run a scheduler (fire the declared schedules), or ``--list`` them.

Any number of these (and of workers acting as schedulers) may run on any hosts: each (schedule,
tick) is pushed once (kinetis_queue/schedules/stores.py). SIGTERM or SIGINT stops it between ticks.
"""

from __future__ import annotations

import json
import signal
import threading
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import DatabaseError

from kinetis_queue.exceptions import KinetisQueueError
from kinetis_queue.management.commands._arguments import positive_number
from kinetis_queue.management.commands._output import QueueCommand
from kinetis_queue.management.commands._tables import table
from kinetis_queue.schedules import declaration
from kinetis_queue.schedules.scheduler import DEFAULT_CLAIM_TIMEOUT, Scheduler, ScheduleStatus


def _when(value: Any) -> str:
    return "-" if value is None else value.isoformat(timespec="seconds")


class Command(QueueCommand):
    help = (
        "Fire the schedules of KINETIS_QUEUE['SCHEDULE'] and @schedule: each due tick is pushed once, whatever "
        "the number of schedulers. --list shows each schedule's next run, last run and last job id."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--list", action="store_true", help="list the schedules and exit")
        parser.add_argument("--json", action="store_true", help="with --list: print JSON")
        parser.add_argument("--once", action="store_true", help="fire what is due now, then exit")
        parser.add_argument(
            "--claim-timeout",
            type=positive_number,
            default=DEFAULT_CLAIM_TIMEOUT,
            help="seconds after which a claim on an SQS/RabbitMQ connection that was never marked pushed is "
            f"taken over by another scheduler (default {DEFAULT_CLAIM_TIMEOUT:g})",
        )
        parser.add_argument(
            "--max-sleep",
            type=positive_number,
            default=None,
            help="sleep at most this many seconds between two looks (default: until the next tick, at most 30)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            schedules = declaration.load()
        except KinetisQueueError as exc:
            raise CommandError(str(exc)) from exc
        scheduler = Scheduler(schedules, claim_timeout=options["claim_timeout"])
        if options["list"]:
            try:
                lines = scheduler.status()
            except (KinetisQueueError, DatabaseError) as exc:
                raise CommandError(f"cannot read the schedules' state: {type(exc).__name__}: {exc}") from exc
            self._list(lines, options["json"])
            broken = [s.name for s in lines if s.error is not None]
            if broken:
                raise CommandError(f"the last run of {', '.join(broken)} could not be read")
            return
        if not schedules:
            raise CommandError("no schedule is declared (KINETIS_QUEUE['SCHEDULE'] or @schedule)")
        self._run(scheduler, options["once"], options["max_sleep"], int(options["verbosity"]))

    def _run(self, scheduler: Scheduler, once: bool, max_sleep: float | None, verbosity: int) -> None:
        stop = threading.Event()
        previous = {signum: signal.signal(signum, lambda *_: stop.set()) for signum in (signal.SIGTERM, signal.SIGINT)}
        if verbosity >= 1:
            names = ", ".join(s.name for s in scheduler.schedules)
            self.stdout.write(f"Scheduler started for {len(scheduler.schedules)} schedule(s): {names}")
        try:
            while not stop.is_set():
                wait = scheduler.fire_due()
                if once:
                    break
                stop.wait(wait if max_sleep is None else min(wait, max_sleep))
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if verbosity >= 1:
            self.stdout.write(f"Scheduler stopped; it pushed {len(scheduler.pushed)} job(s).")

    def _list(self, lines: list[ScheduleStatus], as_json: bool) -> None:
        if as_json:
            payload = [
                {
                    "name": s.name,
                    "when": s.when,
                    "job": s.job,
                    "connection": s.connection,
                    "queue": s.queue,
                    "next_run": _when(s.next_run),
                    "last_run": None if s.last_run is None else _when(s.last_run),
                    "last_job_id": s.last_job_id,
                    "error": s.error,
                }
                for s in lines
            ]
            self.stdout.write(json.dumps({"schedules": payload}, indent=2))
            return
        rows = [("NAME", "WHEN", "JOB", "CONNECTION", "QUEUE", "NEXT RUN", "LAST RUN", "LAST JOB ID")]
        for s in lines:
            rows.append(
                (
                    s.name,
                    s.when,
                    s.job,
                    s.connection,
                    s.queue,
                    _when(s.next_run),
                    _when(s.last_run) if s.error is None else f"unavailable ({s.error})",
                    s.last_job_id or "-",
                )
            )
        for text in table(rows):
            self.stdout.write(text)
