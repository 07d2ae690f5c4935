"""A middleware from outside the package (docs/middleware.md), added to KINETIS_QUEUE["MIDDLEWARE"] by
tests/conformance/test_middleware.py: it counts the attempts started per job class and marks each push."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from kinetis_queue.middleware import Middleware, PushDraft
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
