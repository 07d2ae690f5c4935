"""The process's tally: its pushes and deliveries per connection, queue and job class, counted in memory.

A count is a few list additions under one lock (a delivery's outcome, its run time, its run-time bucket),
so neither a push nor a delivery waits on a database or a metrics library. Two readers take from it off
the deliveries' path: the history (history.py) writes the minutes to the database once a second, and
the Prometheus collector (metrics.py) reads the process's totals when scraped.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Final

from kinetis_queue.contracts import PreparedPush, Queue, QueuedJob
from kinetis_queue.hooks import DeliveryHooks
from kinetis_queue.job import display_name
from kinetis_queue.outcomes import JobOutcome, JobReport
from kinetis_queue.payload.registry import name_label

logger = logging.getLogger("kinetis_queue")

#: The run-time histogram's upper bounds in seconds; one more bucket holds the longer runs.
BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
#: The longest job label kept (a class path or a task's name); names this process does not know are
#: counted under registry.UNKNOWN_NAME, so a payload cannot add series or history rows.
MAX_JOB: Final = 200
#: Ended minutes kept for a history that cannot write them (the oldest are dropped beyond).
MAX_MINUTES: Final = 60

#: A key's counts, by index: PUSHED, then one per outcome (OUTCOME_INDEX), RUNTIME (seconds summed), then
#: the buckets from FIRST_BUCKET.
PUSHED: Final = 0
OUTCOME_INDEX: Final = {outcome: 1 + n for n, outcome in enumerate(JobOutcome)}
RUNTIME: Final = 1 + len(JobOutcome)
FIRST_BUCKET: Final = RUNTIME + 1
WIDTH: Final = FIRST_BUCKET + len(BUCKETS) + 1

Key = tuple[str, str, str]  # connection, queue, job
#: One minute's counts of one key, as the history takes them: (Unix minute, key, counts).
Row = tuple[int, Key, list[float]]


class Tally:
    """One process's counts: the current minute's, the ended minutes the history has not taken yet (when
    it keeps them), and the totals since the process started."""

    def __init__(self) -> None:
        #: Set while HISTORY is on: ended minutes are kept for take(), and ``flusher`` is called on the
        #: process's first count (the history's writer thread: started in the process that counts, so a
        #: forked child starts its own).
        self.keep_minutes = False
        self.flusher: Callable[[], None] | None = None
        self._reset()

    def _reset(self) -> None:
        """Start empty, under a new source (also in a forked child: its parent's counts are its parent's,
        and its parent's lock may have been held by a thread the child does not have)."""
        self._lock = threading.Lock()
        self.source = uuid.uuid4().hex
        self._minute = int(time.time() // 60)
        self._current: dict[Key, list[float]] = {}
        #: Keys of the current minute counted since the history last took them.
        self._dirty: set[Key] = set()
        self._ended: dict[int, dict[Key, list[float]]] = {}
        self._lifetime: dict[Key, list[float]] = {}
        self._flusher_started = False

    # -- counting (the lock held) -----------------------------------------------------------------

    def _counts_of(self, connection: str, queue: str, job: str) -> list[float]:
        minute = int(time.time() // 60)
        if minute != self._minute:
            self._roll(minute)
        key = (connection, queue, job)
        counts = self._current.get(key)
        if counts is None:
            # A name first seen this minute: one not registered here folds into UNKNOWN_NAME (a known
            # name is counted under itself from its next count on, at a dict lookup's cost).
            key = (connection, queue, name_label(job)[:MAX_JOB])
            counts = self._current.get(key)
        if counts is None:
            counts = self._current[key] = [0.0] * WIDTH
            if not self._flusher_started and self.flusher is not None:
                self._flusher_started = True
                self.flusher()
        self._dirty.add(key)
        return counts

    def flusher_stopped(self) -> None:
        """The flusher stopped (its worker did): the next count starts it again."""
        self._flusher_started = False

    def pushed(self, connection: str, queue: str, job: str) -> None:
        with self._lock:
            self._counts_of(connection, queue, job)[PUSHED] += 1

    def delivered(self, connection: str, report: JobReport) -> None:
        duration = report.duration
        with self._lock:
            counts = self._counts_of(connection, report.queue, report.name or report.job_class)
            counts[OUTCOME_INDEX[report.outcome]] += 1
            counts[RUNTIME] += duration
            counts[FIRST_BUCKET + bisect.bisect_left(BUCKETS, duration)] += 1

    def _roll(self, minute: int) -> None:
        """The current minute ended: its counts join the totals, and (for the history) its keys counted
        since they were last taken join the ended minutes."""
        for key, counts in self._current.items():
            total = self._lifetime.get(key)
            if total is None:
                self._lifetime[key] = list(counts)
            else:
                for index, value in enumerate(counts):
                    total[index] += value
        if self.keep_minutes and self._dirty:
            self._ended.setdefault(self._minute, {}).update((key, self._current[key]) for key in self._dirty)
            self._bound()
        self._minute, self._current, self._dirty = minute, {}, set()

    def _bound(self) -> None:
        while len(self._ended) > MAX_MINUTES:
            del self._ended[min(self._ended)]
            logger.warning("History: a minute's counts dropped (its writes keep failing)")

    # -- reading ------------------------------------------------------------------------------------

    def take(self) -> list[Row]:
        """What the history writes next: the ended minutes' counts and the current minute's keys counted
        since the last take (copies: a count after this is in the next take)."""
        with self._lock:
            minute = int(time.time() // 60)
            if minute != self._minute:
                self._roll(minute)
            rows = [(m, key, counts) for m, keys in self._ended.items() for key, counts in keys.items()]
            rows.extend((self._minute, key, list(self._current[key])) for key in self._dirty)
            self._ended, self._dirty = {}, set()
        return rows

    def give_back(self, rows: Sequence[Row]) -> None:
        """Rows whose write failed, for the next take (newer counts of a key taken since win)."""
        with self._lock:
            for minute, key, counts in rows:
                if minute == self._minute:
                    self._dirty.add(key)
                else:
                    self._ended.setdefault(minute, {}).setdefault(key, counts)
            self._bound()

    def totals(self) -> dict[Key, list[float]]:
        """The counts since the process started, per key (the Prometheus collector's figures)."""
        with self._lock:
            found = {key: list(counts) for key, counts in self._lifetime.items()}
            for key, counts in self._current.items():
                total = found.setdefault(key, [0.0] * WIDTH)
                for index, value in enumerate(counts):
                    total[index] += value
        return found


TALLY = Tally()
os.register_at_fork(after_in_child=TALLY._reset)


def observe_pushes(queue: Queue, prepared: Sequence[PreparedPush]) -> None:
    """A push observer (observability/setup.py, push_side()): count the stored pushes."""
    connection = queue.connection or ""
    for item in prepared:
        envelope = item.envelope
        TALLY.pushed(connection, item.queue, display_name(envelope.job_class, envelope.args))


class TallyHooks(DeliveryHooks):
    """The worker's side: each delivery's outcome and run time into the process's tally."""

    wants_reports = True

    def __init__(self) -> None:
        self.connection = ""

    def start(self, queue: Queue) -> None:
        self.connection = queue.connection or ""

    def reported(self, job: QueuedJob, report: JobReport) -> None:
        TALLY.delivered(self.connection, report)
