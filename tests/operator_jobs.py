"""Jobs for the operator tests (worker limits, failed jobs, redaction); importable by worker subprocesses."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from kinetis_queue import Job, JobContext, Sensitive, limit_concurrency
from kinetis_queue.job import Snooze

#: Memory a job keeps alive on purpose (the --memory limit test).
HELD: list[bytes] = []


@dataclass
class LeaksSecret(Job):
    """Fails with its Sensitive token in the exception message (a careless handler)."""

    label: str
    token: Annotated[str, Sensitive]

    def handle(self) -> None:
        raise ValueError(f"could not use token {self.token} for {self.label}")


@dataclass
class Loops(Job):
    """Spins in a Python loop until ``seconds`` pass (a job stuck in a loop); writes ``marker`` first."""

    marker: str
    seconds: float = 600

    def handle(self, context: JobContext) -> None:
        Path(self.marker).write_text(str(context.attempts))
        deadline = time.monotonic() + self.seconds
        n = 0
        while time.monotonic() < deadline:
            n += 1


@dataclass
class SwallowsEverything(Job):
    """Catches every exception (BaseException too) around a sleep, then returns."""

    seconds: float

    def handle(self) -> None:
        try:
            time.sleep(self.seconds)
        except BaseException:  # deliberately defeats the interrupt
            pass


@dataclass
class CatchesException(Job):
    """Catches Exception around a long sleep: the timeout interrupt must still get through."""

    seconds: float

    def handle(self) -> None:
        try:
            time.sleep(self.seconds)
        except Exception:
            pass


@dataclass
class Holds(Job):
    """Keeps ``megabytes`` of memory alive in this process."""

    megabytes: int

    def handle(self) -> None:
        HELD.append(b"x" * (self.megabytes * 1_048_576))


@dataclass
class Touches(Job):
    """Writes ``path`` (appending one line per run)."""

    path: str

    def handle(self, context: JobContext) -> None:
        with open(self.path, "a") as file:
            file.write(f"{context.attempts}\n")


@dataclass
class TakesSecret(Job):
    """Fails for good with a plain message; its token and credentials are Sensitive."""

    label: str
    token: Annotated[str, Sensitive]
    credentials: Annotated[dict[str, Any] | None, Sensitive] = None

    def handle(self) -> None:
        raise RuntimeError("the upstream refused the request")


class SnoozesTenMinutes(Job):
    """Cannot start yet: asks to come back in ten minutes (a deferred job, not a ready one)."""

    def handle(self) -> None:
        raise Snooze(600, "not yet")


@limit_concurrency(max=1, delay=600)
class OneAtATimeSlowly(Job):
    """At most one at once per connection; a delivery at the limit comes back ten minutes later."""

    def handle(self) -> None:
        pass


class LogsProgress(Job):
    """Logs an INFO line through its context's logger, as a task logs its progress."""

    def handle(self, context: JobContext) -> None:
        context.logger.info("LogsProgress is half way")
