"""Tagged test jobs: each records ``exec.start`` and ``exec.done`` (or ``exec.raise``) into the history.

``exec.done`` is written when ``handle()`` returns, before the worker settles (RELIABILITY.md §2.1),
so "executed" in the checker means the job's work completed, whatever happened to its settlement.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from kinetis_queue import Job, JobContext, crashpoints
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
