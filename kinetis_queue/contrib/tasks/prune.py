"""``PruneTaskResults``: the job that prunes finished django.tasks results, for a schedule to name.

    KINETIS_QUEUE = {..., "IMPORTS": ["kinetis_queue.contrib.tasks.prune"], "SCHEDULE": {"prune-task-results": {
        "CRON": "30 4 * * *", "JOB": "kinetis_queue.contrib.tasks.prune.PruneTaskResults", "ARGS": {"hours": 336}}}}

The same rule as ``manage.py queue_prune_task_results`` (kinetis_queue.contrib.tasks.results.prune):
READY and RUNNING results are never pruned. Listing the module in IMPORTS is what lets a schedule
name the job (a worker imports it at start-up, like any job module).
"""

from __future__ import annotations

from kinetis_queue.contrib.tasks.results import prune
from kinetis_queue.exceptions import InvalidQueueArgumentError
from kinetis_queue.job import Job, JobContext

#: The default age cut-off, in hours (14 days), as the command's ``--hours``.
DEFAULT_HOURS = 336.0


class PruneTaskResults(Job):
    """Delete SUCCESSFUL and FAILED task results that finished more than ``hours`` ago."""

    def __init__(self, hours: float = DEFAULT_HOURS) -> None:
        self.hours = hours

    def handle(self, context: JobContext) -> None:
        hours = self.hours
        if type(hours) not in (int, float) or not 0 <= hours < float("inf"):
            raise InvalidQueueArgumentError("PruneTaskResults(hours=...) must be a number of hours, 0 or more")
        removed = prune(float(hours))
        context.logger.info("pruned %d finished task result(s) older than %g hour(s)", removed, hours)
