"""The benchmark's job: a no-op, so a drain measures the queue and the worker, not the work.

Autodiscovered by kinetis_queue's app config (``bench`` is in INSTALLED_APPS of bench.settings),
so the worker process resolves ``bench.jobs.Noop`` like any project's job class.
"""

from __future__ import annotations

from kinetis_queue import Job


class Noop(Job):
    """Does nothing."""

    def handle(self) -> None:
        pass
