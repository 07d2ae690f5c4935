"""The worker: ``queue_work``'s process, from the reserving loop to one delivery's settlement.

One module per part: ``worker`` (Worker: the loop and one delivery's lifecycle), ``dispatcher`` (the
reserving loop and its ``--concurrency`` slots), ``delivery`` (one attempt to its report), ``settlement``
(the one transition per delivery), ``acks`` (successful acks in batches), ``heartbeat`` (reservation
renewal), ``hygiene`` (Django connections around each job), ``job_timeout`` and ``timeout_watchdog``
(the hard limit on one attempt), ``run_limits`` (when run() stops on its own), ``restart`` (the marker a
worker watches), ``supervisor`` (``--processes N``), ``background`` and ``async_loop`` (the threads beside
the jobs) and ``log`` (how log lines name a job).
"""

from __future__ import annotations

from kinetis_queue.worker.worker import (
    DEFAULT_PREFETCH,
    MAX_RETRY_DELAY,
    ExitReason,
    JobOutcome,
    JobReport,
    Worker,
    retry_delay,
)

# The worker's public names, imported from here by the command, the tests and users.
__all__ = ["DEFAULT_PREFETCH", "MAX_RETRY_DELAY", "ExitReason", "JobOutcome", "JobReport", "Worker", "retry_delay"]
