"""Structured logs: a JSON formatter, and one record per delivery (``KINETIS_QUEUE["JOB_LOG"] = True``).

``PlainFormatter`` writes each record as one line with its control characters escaped (a payload's
name cannot drive a terminal). ``JsonFormatter`` writes each record as one JSON object: time, level,
logger, message, and the job's fields when the record carries them (job_class, job_name, job_id,
attempt, queue, connection, outcome, duration, error, correlation_id). The worker's records carry the
job's fields already; with JOB_LOG, logger ``kinetis_queue.jobs`` also gets one INFO record per
delivery when it settled, with its outcome and duration. Argument values are in none of them.

```python
LOGGING = {
    "version": 1,
    "formatters": {"json": {"()": "kinetis_queue.observability.logs.JsonFormatter"}},
    "filters": {"correlation": {"()": "kinetis_queue.observability.correlation.CorrelationFilter"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "json", "filters": ["correlation"]}},
    "loggers": {"kinetis_queue": {"handlers": ["console"], "level": "INFO"}},
}
```
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Final

from kinetis_queue.contracts import Queue, QueuedJob
from kinetis_queue.hooks import DeliveryHooks
from kinetis_queue.outcomes import JobReport
from kinetis_queue.payload.printable import printable
from kinetis_queue.worker.log import PrintableArgs

#: The record attributes the formatter copies when present.
FIELDS: Final = (
    "job_class",
    "job_name",
    "job_id",
    "attempt",
    "queue",
    "connection",
    "outcome",
    "duration",
    "error",
    "correlation_id",
)

jobs_logger = logging.getLogger("kinetis_queue.jobs")
jobs_logger.addFilter(PrintableArgs())


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                data[name] = value
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str, ensure_ascii=False)


class PlainFormatter(logging.Formatter):
    """A plain-text line per record with its control characters escaped (printable()): a name or an
    exception text chosen by a payload can neither drive the terminal (``ESC[2J``) nor forge another
    line (a newline); the traceback, written by the logging module, keeps its lines. queue_work's own
    handler uses it; set it as the ``"()"`` of your LOGGING formatter for the same on yours."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return printable(super().formatMessage(record))


class JobLogHooks(DeliveryHooks):
    """JOB_LOG: one record per settled delivery on ``kinetis_queue.jobs``."""

    wants_reports = True

    def __init__(self) -> None:
        self.connection: str | None = None

    def start(self, queue: Queue) -> None:
        self.connection = queue.connection

    def reported(self, job: QueuedJob, report: JobReport) -> None:
        if not jobs_logger.isEnabledFor(logging.INFO):
            return  # the record's extra would be built for nothing
        jobs_logger.info(
            'Job "%s" %s in %.3fs (attempt %d)',
            report.name or report.job_class,
            report.outcome.value,
            report.duration,
            report.attempt,
            extra={
                "job_class": report.job_class,
                "job_name": report.name or report.job_class,
                "job_id": report.job_id,
                "attempt": report.attempt,
                "queue": report.queue,
                "connection": self.connection,
                "outcome": report.outcome.value,
                "duration": round(report.duration, 6),
                "error": report.error,
            },
        )
