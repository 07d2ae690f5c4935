"""How the worker's log lines speak of a job: one logger, the context each record carries, and
logging that never raises into the worker (contract: observers never decide). Never argument values."""

from __future__ import annotations

import logging
from typing import Any

from kinetis_queue.contracts import QueuedJob
from kinetis_queue.job import display_name
from kinetis_queue.payload.printable import printable

#: The metadata key of the correlation id (kinetis_queue/observability/correlation.py), shown on log records.
CORRELATION_KEY = "kinetis_queue.correlation"
#: Every worker line, whichever module writes it, goes to this logger (docs/running-workers.md).
logger = logging.getLogger("kinetis_queue.worker")
#: A job's own lines (``JobContext.logger``): a child of the worker's logger, so that queue_work can show
#: their INFO lines at its default verbosity without the worker's own.
JOB_LOGGER = "kinetis_queue.worker.job"
job_logger = logging.getLogger(JOB_LOGGER)


class PrintableArgs(logging.Filter):
    """Escape control characters (printable()) in a record's string arguments and its ``job_name``: what a
    payload chose (a task's or receiver's name, an exception's text) reaches every handler of the
    project's as one line that cannot drive a terminal, whatever its formatter. A logger's filter runs
    only for a record that is emitted: a disabled level costs nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(printable(arg) if isinstance(arg, str) else arg for arg in record.args)
        name = getattr(record, "job_name", None)
        if isinstance(name, str):
            record.job_name = printable(name)
        return True


logger.addFilter(PrintableArgs())


def contained(log: Any, message: str, *args: Any, **kwargs: Any) -> None:
    """Log, discarding any error the logging system raises (contract: observers never decide)."""
    try:
        log(message, *args, **kwargs)
    except Exception:  # noqa: S110
        pass


def job_name(job: QueuedJob) -> str:
    """What lines about ``job`` call it: the task or receiver it carries, else its class path."""
    return display_name(job.job_class, job.args)


def describe(job: QueuedJob) -> dict[str, Any]:
    """The job's log context: what every log record about it carries (never its arguments)."""
    return {
        "job_class": job.job_class,
        "job_name": job_name(job),
        "queue": job.queue,
        "job_id": job.id,
        "attempt": job.attempts,
        "correlation_id": job.metadata.get(CORRELATION_KEY) if job.metadata else None,
    }


def attempt_of(attempt: int, cap: int) -> str:
    """ "attempt 2 of 3" for a log line, worded so that a cap of 0 never reads "attempt 1 of 0"."""
    if cap == 0:
        return f"attempt {attempt}; no retries: max attempts is 0"
    if attempt > cap:
        return f"attempt {attempt}, past the cap of {cap}"
    return f"attempt {attempt} of {cap}"
