"""Middleware from outside the package (docs/middleware.md), added to KINETIS_QUEUE["MIDDLEWARE"] by the tests:
CountAttempts (tests/conformance/test_middleware.py) counts the attempts started per job class and marks each push;
ProvidedMetadata adds the metadata a test gives to each push (``provided_metadata()``)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.test import override_settings

from kinetis_queue.middleware import DEFAULT_MIDDLEWARE, Middleware, PushDraft
from kinetis_queue.outcomes import AtLimit, SkipDelivery

#: Where each push's mark goes in the envelope's metadata.
MARK = "tests.counted"

#: Attempts started, per job class, by every worker of this process (the instances are one per worker).
STARTED: Counter[str] = Counter()
#: What the jobs' metadata carried under MARK when their attempt started.
MARKS: list[Any] = []
_lock = threading.Lock()


class CountAttempts(Middleware):
    """Marks each push with its queue's name (push side) and counts each attempt that starts (delivery side)."""

    def prepare(self, draft: PushDraft) -> None:
        draft.metadata[MARK] = draft.queue_name

    def started(self, job: Any) -> None:
        with _lock:
            STARTED[job.job_class] += 1
            MARKS.append(job.metadata.get(MARK))


def reset() -> None:
    with _lock:
        STARTED.clear()
        MARKS.clear()
        EVENTS.clear()


#: Every delivery-side call of Lifecycle, in order: (method, job label[, outcome]).
EVENTS: list[tuple[str, ...]] = []


class Lifecycle(Middleware):
    """Records each delivery-side call (tests/conformance/test_middleware.py asserts the sequence per path); it
    refuses the admission of a job labelled "skip" (SkipDelivery) and the claim of one labelled "defer" (AtLimit)."""

    wants_reports = True

    def _record(self, method: str, job: Any, *more: str) -> None:
        with _lock:
            EVENTS.append((method, str(job.args.get("label")), *more))

    def admit(self, job: Any) -> None:
        self._record("admit", job)
        if job.args.get("label") == "skip":
            raise SkipDelivery("skipped by tests.counting_middleware.Lifecycle")

    def claim(self, job: Any, instance: Any) -> None:
        self._record("claim", job)
        if job.args.get("label") == "defer":
            raise AtLimit(30.0, "deferred by tests.counting_middleware.Lifecycle")

    def unclaim(self, job: Any) -> None:
        self._record("unclaim", job)

    def started(self, job: Any) -> None:
        self._record("started", job)

    def succeeding(self, job: Any) -> None:
        self._record("succeeding", job)

    def failing(self, job: Any) -> None:
        self._record("failing", job)

    def skipped(self, job: Any, skipped: SkipDelivery) -> None:
        self._record("skipped", job)

    def ended(self, job: Any) -> None:
        self._record("ended", job)

    def reported(self, job: Any, report: Any) -> None:
        self._record("reported", job, str(report.outcome))


#: What ProvidedMetadata adds to each push, given its job class: set by provided_metadata().
_PROVIDERS: list[Callable[[str], dict[str, Any]]] = []


class ProvidedMetadata(Middleware):
    """Adds to each push's metadata what the test's providers return for its job class, after the built-in
    middleware (so a key it gives replaces theirs: a malformed trace context, a per-job timeout)."""

    def prepare(self, draft: PushDraft) -> None:
        for provide in _PROVIDERS:
            draft.metadata.update(provide(draft.job_class))


@contextmanager
def provided_metadata(provide: Callable[[str], dict[str, Any]]) -> Iterator[None]:
    """The current KINETIS_QUEUE with ProvidedMetadata after the default chain, adding ``provide(job_class)``."""
    path = f"{__name__}.{ProvidedMetadata.__qualname__}"
    with override_settings(KINETIS_QUEUE={**settings.KINETIS_QUEUE, "MIDDLEWARE": [*DEFAULT_MIDDLEWARE, path]}):
        _PROVIDERS.append(provide)
        try:
            yield
        finally:
            _PROVIDERS.remove(provide)
