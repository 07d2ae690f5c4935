"""Job classes used by the tests (module level, so a worker in another process can resolve them)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Annotated

from kinetis_queue import Job, JobContext, Sensitive, limit_concurrency

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


class UrgentRecords(Records):
    """Records, at priority 10 unless a push says otherwise (Job.priority)."""

    priority = 10


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


# -- unique jobs (kinetis_queue.unique; tests/conformance/test_unique.py) ------------------------------


class Unique(Job):
    """Unique for a minute by class and arguments, until settled (the default scope); records its label."""

    unique_for = 60

    def __init__(self, label: str) -> None:
        self.label = label

    def handle(self, context: JobContext) -> None:
        CALLS.append(("Unique", self.label, context.id))


class UniqueUntilStarted(Unique):
    unique_until = "started"


class UniqueScheduled(Unique):
    """Unique for ten minutes (a schedule's tick must still hold its key when the next one fires); a push whose
    key is held raises (a scheduler's tick is deduplicated all the same)."""

    unique_for = 600
    unique_on_duplicate = "raise"


class UniquePrioritizedScheduled(UniqueScheduled):
    """UniqueScheduled with a priority of its class (issue 27 item 9: schedules push with both)."""

    priority = 7


class UniqueForAWhile(Unique):
    """Holds its key for ``unique_for`` seconds whatever it does."""

    unique_until = "expired"


class Debounced(Unique):
    """One key for the class, whatever the label: a push while the holder waits replaces its label and delay."""

    unique_until = "started"
    unique_debounce = True

    def unique_key(self) -> str:
        return "one"


class UniqueKeyRaises(Unique):
    def unique_key(self) -> str:
        raise ValueError("secret-customer-42")


class UniqueByCustomer(Job):
    """Unique per customer, whatever the note: ``unique_key()``."""

    unique_for = 60

    def __init__(self, customer: int, note: str = "") -> None:
        self.customer = customer
        self.note = note

    def unique_key(self) -> str:
        return f"customer:{self.customer}"

    def handle(self, context: JobContext) -> None:
        CALLS.append(("UniqueByCustomer", self.customer, self.note, context.id))


class UniqueCallsBack(CallsBack):
    """CallsBack, unique by class (it takes no arguments) until settled."""

    unique_for = 60


# -- concurrency limits (kinetis_queue.limits; tests/conformance/test_limits.py) -------------------------


@limit_concurrency(max=1, delay=0.2)
class OneAtATime(CallsBack):
    """CallsBack, at most one running at once per connection (the class is the key)."""


@limit_concurrency(key=lambda job: f"customer:{job.customer}", max=2)
class PerCustomer(Job):
    def __init__(self, customer: int) -> None:
        self.customer = customer

    def handle(self, context: JobContext) -> None:
        CALLS.append(("PerCustomer", self.customer, context.attempts))


@limit_concurrency(key=lambda job: 1 / 0, max=1)
class KeyRaises(Job):
    def handle(self) -> None:
        pass


@limit_concurrency(key=lambda job: 42, max=1)
class KeyNotAString(Job):
    def handle(self) -> None:
        pass


#: Set by a test: each is called with the job inside HookedDebounced's concurrency key, that is between the pop
#: and the attempt (a test makes something happen there: a stolen reservation, say).
KEY_HOOKS: list[Callable[[Job], None]] = []


def _hooked_key(job: Job) -> str:
    for hook in KEY_HOOKS:
        hook(job)
    return "hooked"


@limit_concurrency(key=_hooked_key, max=1)
class HookedDebounced(Debounced):
    """Debounced (unique until started, one key) and at most one running at once, its key calling KEY_HOOKS."""


class Validates(Job):
    """Its constructor refuses a negative ``amount`` (a ValueError naming the value)."""

    def __init__(self, amount: int) -> None:
        if amount < 0:
            raise ValueError(f"amount {amount} is negative")
        self.amount = amount

    def handle(self) -> None:
        CALLS.append(("Validates", self.amount))


# -- cancelling and pausing (kinetis_queue.control; tests/conformance/test_cancel.py, test_pause.py) -----


@dataclass
class LoopsUntilCancelled(Job):
    """A long job that stops cooperatively: records that it started, then looks at ``context.cancelled``
    every 10 ms for up to ``limit`` seconds, and records how it ended ("cancelled" or "ran out")."""

    limit: float = 30.0

    def handle(self, context: JobContext) -> None:
        CALLS.append(("LoopsUntilCancelled", "started", context.id))
        deadline = time.monotonic() + self.limit
        while time.monotonic() < deadline:
            if context.cancelled:
                CALLS.append(("LoopsUntilCancelled", "cancelled", context.id))
                return
            time.sleep(0.01)
        CALLS.append(("LoopsUntilCancelled", "ran out", context.id))


@dataclass
class RecordsStart(Job):
    """Appends "<pid> <unix time> <label>" to the file ``path`` when it starts (one write, so lines of
    several worker processes never mix), then sleeps ``seconds``: what ran where, and when it began."""

    path: str
    label: str
    seconds: float = 0.0

    def handle(self) -> None:
        line = f"{os.getpid()} {time.time():.6f} {self.label}\n".encode()
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(descriptor, line)
        finally:
            os.close(descriptor)
        time.sleep(self.seconds)


class RateLimitedCustomer(Job):
    """At most one start per 30 seconds per customer (kinetis_queue.ratelimits): its rate key is the customer."""

    rate_limit = (1, 30)

    def __init__(self, customer: int) -> None:
        self.customer = customer

    def rate_key(self) -> str:
        return f"customer:{self.customer}"

    def handle(self, context: JobContext) -> None:
        CALLS.append(("RateLimitedCustomer", self.customer, context.attempts))


class RateKeyRaises(Job):
    rate_limit = (5, 60)

    def rate_key(self) -> str:
        raise ValueError("secret-rate-key-value")

    def handle(self) -> None:
        pass


class BadRateDeclaration(Job):
    rate_limit = (0, 60)

    def handle(self) -> None:
        pass


class ExpiresSoon(Job):
    """Not started within 0.3 s of its push: never run (kinetis_queue.expiry)."""

    expires = 0.3

    def handle(self) -> None:
        CALLS.append(("ExpiresSoon",))


class BadExpiry(Job):
    expires = -5

    def handle(self) -> None:
        pass
