"""Tagged test jobs: each records ``exec.start`` and ``exec.done`` (or ``exec.raise``) into the history.

``exec.done`` is written when ``handle()`` returns, before the worker settles (RELIABILITY.md §2.1),
so "executed" in the checker means the job's work completed, whatever happened to its settlement.
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass
from pathlib import Path

from kinetis_queue import Job, JobContext, crashpoints, limit_concurrency
from tests.faults import history


def _start(tag: str, context: JobContext) -> None:
    history.record("exec.start", tag, attempt=context.attempts, job_id=context.id, queue=context.queue)


def _done(tag: str, context: JobContext) -> None:
    history.record("exec.done", tag, attempt=context.attempts, job_id=context.id)


@dataclass
class Tagged(Job):
    """Works for ``ms`` milliseconds (sleeping), then returns."""

    tag: str
    ms: int = 0

    def handle(self, context: JobContext) -> None:
        _start(self.tag, context)
        if self.ms:
            time.sleep(self.ms / 1000)
        _done(self.tag, context)


@dataclass
class RandomDuration(Job):
    """Works for a duration drawn per execution from ``[low_ms, high_ms]``, seeded by (seed, tag, attempt)."""

    tag: str
    low_ms: int
    high_ms: int
    seed: int

    def handle(self, context: JobContext) -> None:
        _start(self.tag, context)
        rng = random.Random(f"{self.seed}-{self.tag}-{context.attempts}")
        time.sleep(rng.uniform(self.low_ms, self.high_ms) / 1000)
        _done(self.tag, context)


@dataclass
class TaggedFails(Job):
    """Raises every time (a job the worker gives up on at its cap)."""

    tag: str

    def handle(self, context: JobContext) -> None:
        _start(self.tag, context)
        history.record("exec.raise", self.tag, attempt=context.attempts, job_id=context.id)
        raise RuntimeError("deliberate failure")


@dataclass
class CrashesInHandle(Job):
    """The ``in_handle`` crash point: the job itself reaches it (and so exits mid-handle when it is set)."""

    tag: str
    ms: int = 0

    def handle(self, context: JobContext) -> None:
        _start(self.tag, context)
        crashpoints.reach("in_handle")
        if self.ms:
            time.sleep(self.ms / 1000)
        _done(self.tag, context)


@dataclass
class Spins(Job):
    """Works for ``ms`` milliseconds in a CPU-bound pure-Python loop (the GIL changes hands only at switches)."""

    tag: str
    ms: int

    def handle(self, context: JobContext) -> None:
        _start(self.tag, context)
        deadline = time.monotonic() + self.ms / 1000
        total = 0
        while time.monotonic() < deadline:
            for i in range(10_000):
                total += i * i
        _done(self.tag, context)


@dataclass
class ExitsEveryAttempt(Job):
    """A poison pill: ends its worker with ``os._exit(137)`` on every attempt while the file ``armed`` exists.

    The test removes ``armed`` before its drain, so the drain (run in the test's own process) completes it.
    """

    tag: str
    armed: str

    def handle(self, context: JobContext) -> None:
        _start(self.tag, context)
        if Path(self.armed).exists():
            os._exit(crashpoints.EXIT_CODE)
        _done(self.tag, context)


@dataclass
class FailsFirstAttempt(Job):
    """Raises on attempt 1 and returns on any later one: a job the worker releases once."""

    tag: str

    def handle(self, context: JobContext) -> None:
        _start(self.tag, context)
        if context.attempts == 1:
            history.record("exec.raise", self.tag, attempt=context.attempts, job_id=context.id)
            raise RuntimeError("deliberate first-attempt failure")
        _done(self.tag, context)


@dataclass
class FailsFirstRun(Job):
    """Raises the first time any process runs it and returns after: a marker file beside the history says so.

    Unlike an attempt number, the marker tells runs apart on RabbitMQ, where a redelivery keeps the count.
    """

    tag: str

    def handle(self, context: JobContext) -> None:
        _start(self.tag, context)
        marker = Path(os.environ[history.ENV]) / f"ran-{self.tag}"
        if not marker.exists():
            marker.touch()
            history.record("exec.raise", self.tag, attempt=context.attempts, job_id=context.id)
            raise RuntimeError("deliberate first-run failure")
        _done(self.tag, context)


@dataclass
class UniqueTagged(Tagged):
    """Tagged, unique by its tag (class and arguments) until settled, for two minutes (kinetis_queue.unique)."""

    unique_for = 120


@limit_concurrency(key=lambda job: job.group, max=2)
@dataclass
class LimitedTagged(Job):
    """Tagged, at most two running at once per ``group`` (kinetis_queue.limits); its start says its group."""

    tag: str
    group: str
    ms: int = 0

    def handle(self, context: JobContext) -> None:
        history.record("exec.start", self.tag, attempt=context.attempts, job_id=context.id, group=self.group)
        if self.ms:
            time.sleep(self.ms / 1000)
        _done(self.tag, context)


@dataclass
class Held(Job):
    """Runs until the file ``release`` exists (at most 60 s): a long job whose end the test decides."""

    tag: str
    release: str

    def handle(self, context: JobContext) -> None:
        _start(self.tag, context)
        deadline = time.monotonic() + 60
        while not Path(self.release).exists() and time.monotonic() < deadline:
            time.sleep(0.02)  # a poll of a file another process writes: nothing to wait on instead
        _done(self.tag, context)


#: RateTagged's limit: at most this many starts per RATE_PER seconds per group (tests/faults/test_rate_limits.py).
RATE_LIMIT = 5
RATE_PER = 2.0


@dataclass
class RateTagged(Job):
    """Tagged, at most RATE_LIMIT starts per RATE_PER seconds per ``group`` (kinetis_queue.ratelimits); its start
    says its group."""

    tag: str
    group: str
    ms: int = 0

    rate_limit = (RATE_LIMIT, RATE_PER)

    def rate_key(self) -> str:
        return self.group

    def handle(self, context: JobContext) -> None:
        history.record("exec.start", self.tag, attempt=context.attempts, job_id=context.id, group=self.group)
        if self.ms:
            time.sleep(self.ms / 1000)
        _done(self.tag, context)
