"""``manage.py demo``: push four sample jobs to the SQLite queue, run a worker until they settle, narrate."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand

from demo.jobs import CallFlakyApi, ImportBrokenFile, SendReminder, SendWelcomeEmail
from kinetis_queue import queue, queues, signals
from kinetis_queue.models import FailedJob
from kinetis_queue.worker import Worker

DEMO_QUEUE = "default"
REMINDER_DELAY = 3


class Command(BaseCommand):
    help = "Show kinetis_queue at work on SQLite: push sample jobs, run the worker until all settle."

    def handle(self, *args: Any, **options: Any) -> None:
        out = self.stdout.write
        call_command("migrate", verbosity=0)
        queues.clearable().clear(DEMO_QUEUE)
        FailedJob.objects.filter(queue=DEMO_QUEUE).delete()

        out("Pushing four jobs onto the SQL queue (SQLite, table kinetis_queue_jobs):")
        started = time.monotonic()
        names = {
            queue.push(SendWelcomeEmail("ada@example.com", token="s3cret-token"), queue=DEMO_QUEUE): "SendWelcomeEmail",
            queue.push(SendReminder("ada@example.com"), delay=REMINDER_DELAY, queue=DEMO_QUEUE): "SendReminder",
            queue.push(CallFlakyApi("https://api.example.com/ping"), queue=DEMO_QUEUE, max_attempts=3): "CallFlakyApi",
            queue.push(ImportBrokenFile("contacts.csv"), queue=DEMO_QUEUE, max_attempts=2): "ImportBrokenFile",
        }
        out("  1. SendWelcomeEmail  - should succeed at once")
        out(f"  2. SendReminder      - pushed with a {REMINDER_DELAY} s delay")
        out("  3. CallFlakyApi      - fails on its first attempt, succeeds on the retry (max_attempts=3)")
        out("  4. ImportBrokenFile  - fails every time (max_attempts=2), ends in the failed-jobs table")
        out(f"{queue.size(DEMO_QUEUE)} jobs are waiting. Starting a worker (retry delay: 1 s, doubling).\n")

        settled: set[str] = set()

        def at() -> str:
            return f"[{time.monotonic() - started:4.1f}s]"

        def succeeded(job: Any, **kwargs: Any) -> None:
            settled.add(job.id)
            out(f"{at()} {names[job.id]} succeeded on attempt {job.attempts}.")

        def released(job: Any, exception: BaseException, delay: float, **kwargs: Any) -> None:
            out(
                f"{at()} {names[job.id]} failed on attempt {job.attempts} ({type(exception).__name__}: "
                f"{exception}); it will be retried in {delay:g} s."
            )

        def failed(job: Any, exception: BaseException, failed_job_id: Any, **kwargs: Any) -> None:
            settled.add(job.id)
            out(
                f"{at()} {names[job.id]} failed on attempt {job.attempts} of {job.max_attempts}, its last; "
                f"it was recorded as failed job #{failed_job_id} and removed from the queue."
            )

        receivers = [
            (signals.job_succeeded, succeeded),
            (signals.job_released, released),
            (signals.job_failed_permanently, failed),
        ]
        for signal, receiver in receivers:
            signal.connect(receiver)
        worker = Worker(queues.default(), retry_base_delay=1)
        try:
            deadline = time.monotonic() + 60
            while len(settled) < len(names) and time.monotonic() < deadline:
                worker.process_next(1, [DEMO_QUEUE])
        finally:
            worker.close()
            for signal, receiver in receivers:
                signal.disconnect(receiver)

        record = FailedJob.objects.filter(queue=DEMO_QUEUE).first()
        out("")
        out(f"All {len(settled)} of {len(names)} jobs settled; {queue.size(DEMO_QUEUE)} left waiting.")
        if record is not None:
            out(
                f"Failed job #{record.pk}: {record.job_class}, {record.attempts} attempts, "
                f"{record.exception_class}: {record.exception_message}"
            )
        self._what_next()

    def _what_next(self) -> None:
        """The commands to try after the demo, runnable as printed from the repository root."""
        here = os.getcwd() + os.sep
        python = os.path.relpath(sys.executable) if sys.executable.startswith(here) else sys.executable
        manage = f"{python} {os.path.relpath(sys.argv[0])}"
        out = self.stdout.write
        out("")
        out("Try next (from this folder):")
        out(f"  {manage} queue_failed            # the failed job, safe metadata only")
        out(f"  {manage} queue_status            # what waits, is delayed, reserved or failed, per queue")
        out(
            f"  {manage} queue_retry <ID>        # push a failed job again (then run: {manage} queue_work "
            "--stop-when-empty)"
        )
        out("  The admin, with its Failed jobs list and Queue status page:")
        out(
            f"    DJANGO_SUPERUSER_PASSWORD=demo {manage} createsuperuser --noinput --username demo "
            "--email demo@example.com"
        )
        out(f"    {manage} runserver               # then open http://127.0.0.1:8000/admin/ (demo / demo)")
        out("  `make test` runs the whole suite on every backend (it installs the dev tools and starts the services).")
