"""The kinetis-queue rows' jobs: the probe functions as Job classes (imported by the worker via IMPORTS)."""

from __future__ import annotations

from dataclasses import dataclass

from bench.peers import probe
from kinetis_queue import Job


@dataclass
class Tick(Job):
    """The no-op job."""

    run: str
    n: int

    def handle(self) -> None:
        probe.tick(self.run, self.n)


@dataclass
class Nap(Job):
    """The I/O-bound job: sleeps ``ms`` milliseconds."""

    run: str
    n: int
    ms: int

    def handle(self) -> None:
        probe.nap(self.run, self.n, self.ms)


@dataclass
class Stamp(Job):
    """The latency job."""

    run: str
    pushed_at: float

    def handle(self) -> None:
        probe.stamp(self.run, self.pushed_at)
