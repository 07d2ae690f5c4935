"""The correlation id: the request's (or the running job's) id, carried by every push it makes.

``CorrelationMiddleware`` takes it from the request's ``X-Request-ID`` (or ``X-Correlation-ID``) header,
else makes one, for the request's duration; a push carries it in the envelope's metadata
(``kinetis_queue.correlation``), and the worker sets it again while the job runs, so the job's own
pushes carry it on. ``CorrelationFilter`` puts it on log records as ``correlation_id`` (the JSON formatter
shows it). An id is at most 128 printable ASCII characters: anything else from a header is replaced.
"""

from __future__ import annotations

import contextvars
import logging
import re
import uuid
from collections.abc import Callable
from typing import Any, Final

from kinetis_queue.contracts import Queue, QueuedJob
from kinetis_queue.hooks import DeliveryHooks
from kinetis_queue.worker.log import CORRELATION_KEY

#: Where the envelope's metadata carries the id (the worker's log records read it there too).
METADATA_KEY: Final = CORRELATION_KEY
HEADERS: Final = ("HTTP_X_REQUEST_ID", "HTTP_X_CORRELATION_ID")
_VALID: Final = re.compile(r"[\x21-\x7e]{1,128}")

_current: contextvars.ContextVar[str | None] = contextvars.ContextVar("kinetis_queue_correlation", default=None)


def current() -> str | None:
    """The correlation id in effect here (a request's, a running job's), or None."""
    return _current.get()


def valid(value: object) -> str | None:
    return value if isinstance(value, str) and _VALID.fullmatch(value) else None


def push_metadata(queue: Queue, queue_name: str, job_class: str) -> dict[str, Any]:
    """A metadata provider (observability/setup.py, push_side()): the current id, when there is one."""
    value = _current.get()
    return {METADATA_KEY: value} if value is not None else {}


class CorrelationHooks(DeliveryHooks):
    """The worker's side: the job's id is current while it runs (its pushes, its log records carry it)."""

    def __init__(self) -> None:
        self._tokens: dict[int, contextvars.Token[str | None]] = {}

    def started(self, job: QueuedJob) -> None:
        value = valid(job.metadata.get(METADATA_KEY)) if job.metadata else None
        if value is not None:
            self._tokens[id(job)] = _current.set(value)

    def ended(self, job: QueuedJob) -> None:
        token = self._tokens.pop(id(job), None)
        if token is not None:
            try:
                _current.reset(token)
            except ValueError:  # ended in another thread (a watchdog's timeout): that context ends with its thread
                pass


class CorrelationMiddleware:
    """Django middleware: the request's correlation id (its header's, else a new one) for its duration."""

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        value = next((v for v in (valid(request.META.get(h)) for h in HEADERS) if v), None) or uuid.uuid4().hex
        token = _current.set(value)
        try:
            response = self.get_response(request)
        finally:
            _current.reset(token)
        response["X-Request-ID"] = value
        return response


class CorrelationFilter(logging.Filter):
    """Adds ``correlation_id`` (or None) to every record it sees."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "correlation_id"):
            record.correlation_id = _current.get()
        return True
