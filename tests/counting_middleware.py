"""A middleware from outside the package (docs/middleware.md), added to KINETIS_QUEUE["MIDDLEWARE"] by
tests/conformance/test_middleware.py: it counts the attempts started per job class and marks each push."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

from kinetis_queue.middleware import Middleware, PushDraft

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
