"""Job classes used by the tests (module level, so a worker in another process can resolve them)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Annotated

from kinetis_queue import Job, JobContext, Sensitive

#: Calls seen in this process: (job class name, args...) tuples.
CALLS: list[tuple[object, ...]] = []


class Noop(Job):
    def handle(self) -> None:
        pass


class Color(Enum):
    RED = "red"
    BLUE = "blue"


class Records(Job):
    """Records its arguments and context into CALLS."""

    def __init__(
        self, label: str, items: list[int] | None = None, color: Color | None = None, when: datetime | None = None
    ) -> None:
        self.label = label
        self.items = items
        self.color = color
        self.when = when

    def handle(self, context: JobContext) -> None:
        CALLS.append(("Records", self.label, self.items, self.color, self.when, context.attempts, context.queue))


class Fails(Job):
    """Raises every time."""

    def __init__(self, label: str = "", token: Annotated[str, Sensitive] = "") -> None:
        self.label = label
        self.token = token

    def handle(self, context: JobContext) -> None:
        CALLS.append(("Fails", self.label, context.attempts))
        raise RuntimeError("deliberate failure")


class FailsOnce(Job):
    """Raises on the first attempt only."""

    def __init__(self, label: str) -> None:
        self.label = label

    def handle(self, context: JobContext) -> None:
        CALLS.append(("FailsOnce", self.label, context.attempts))
        if context.attempts == 1:
            raise RuntimeError("first attempt fails")


@dataclass
class Sleeps(Job):
    """Sleeps for ``seconds`` (holding its reservation), then records."""

    seconds: float
    label: str = ""

    def handle(self) -> None:
        time.sleep(self.seconds)
        CALLS.append(("Sleeps", self.label))


@dataclass
class HangsOnFirstAttempt(Job):
    """Writes ``marker`` and hangs on attempt 1 (to be SIGKILLed); on a later attempt writes ``done``."""

    marker: str
    done: str

    def handle(self, context: JobContext) -> None:
        if context.attempts == 1:
            Path(self.marker).write_text(str(context.attempts))
            time.sleep(600)
        Path(self.done).write_text(str(context.attempts))


#: Set by a test: called with the JobContext inside CallsBack.handle().
CALLBACK: list[object] = []


class CallsBack(Job):
    """Calls the test's callback (tests.jobs.CALLBACK[0]) with its context, then records."""

    def handle(self, context: JobContext) -> None:
        callback = CALLBACK[0]
        callback(context)  # type: ignore[operator]
        CALLS.append(("CallsBack", context.attempts))


@dataclass
class SignalsWhileRunning(Job):
    """Writes ``marker``, waits until ``release`` exists (bounded), then writes ``done``."""

    marker: str
    release: str
    done: str

    def handle(self, context: JobContext) -> None:
        Path(self.marker).write_text(str(context.attempts))
        deadline = time.monotonic() + 60
        while not Path(self.release).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        Path(self.done).write_text(str(context.attempts))


@dataclass
class HangsUntilRerun(Job):
    """The first run writes ``marker`` and hangs (to be SIGKILLed); a later run appends its attempt to ``done``.

    The marker, not the attempt number, tells the runs apart: a broker redelivery keeps the attempt count
    (tests/specific/test_rabbitmq_processes.py).
    """

    marker: str
    done: str

    def handle(self, context: JobContext) -> None:
        marker = Path(self.marker)
        if not marker.exists():
            marker.write_text(str(context.attempts))
            time.sleep(600)
        with Path(self.done).open("a") as done:
            done.write(f"{context.attempts}\n")
