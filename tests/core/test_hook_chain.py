"""HookChain (kinetis_queue/hooks.py): every hook asked in order, nested chains flattened, reports only to
the hooks that want them, and a hook that overrides nothing never called."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kinetis_queue.contracts import QueuedJob
from kinetis_queue.hooks import DeliveryHooks, HookChain
from kinetis_queue.outcomes import AtLimit, JobOutcome, JobReport

JOB = QueuedJob("j1", "q", "tests.jobs.Records", {}, 1, None, datetime.now(UTC))
REPORT = JobReport("tests.jobs.Records", "q", "j1", 1, JobOutcome.SUCCEEDED, 0.1)


class Calls(DeliveryHooks):
    def __init__(self, name: str, seen: list[str], *, reports: bool = False, paused: str = "") -> None:
        self.name, self.seen, self.wants_reports, self.paused = name, seen, reports, paused

    def active(self, queues: tuple[str, ...]) -> tuple[str, ...]:
        self.seen.append(f"{self.name}.active")
        return tuple(q for q in queues if q != self.paused)

    def cancelled(self, job: QueuedJob) -> bool:
        self.seen.append(f"{self.name}.cancelled")
        return self.name == "b"

    def started(self, job: QueuedJob) -> None:
        self.seen.append(f"{self.name}.started")

    def ended(self, job: QueuedJob) -> None:
        self.seen.append(f"{self.name}.ended")

    def reported(self, job: QueuedJob, report: JobReport) -> None:
        self.seen.append(f"{self.name}.reported")


class Silent(DeliveryHooks):
    """Overrides nothing: the chain never calls it."""

    def __getattribute__(self, name: str) -> object:
        if name in {"started", "ended", "admit", "succeeding", "failing", "active", "cancelled"}:
            raise AssertionError(f"{name} called on a hook that does not override it")
        return super().__getattribute__(name)


def test_a_nested_chain_is_asked_in_order_once_and_reports_go_to_who_wants_them() -> None:
    seen: list[str] = []
    chain = HookChain([Calls("a", seen, paused="x"), HookChain([Calls("b", seen, reports=True), Calls("c", seen)])])
    assert chain.wants_reports
    assert chain.active(("x", "y")) == ("y",)
    chain.started(JOB)
    assert chain.cancelled(JOB) is True  # b answers; c is not asked after it
    chain.reported(JOB, REPORT)
    chain.ended(JOB)
    assert seen == [
        "a.active",
        "b.active",
        "c.active",
        "a.started",
        "b.started",
        "c.started",
        "a.cancelled",
        "b.cancelled",
        "b.reported",
        "a.ended",
        "b.ended",
        "c.ended",
    ]


def test_a_hook_overriding_nothing_costs_no_call() -> None:
    chain = HookChain([Silent()])
    assert not chain.wants_reports
    chain.start(None)  # type: ignore[arg-type]
    assert chain.active(("q",)) == ("q",)
    chain.admit(JOB)
    chain.started(JOB)
    chain.succeeding(JOB)
    chain.failing(JOB)
    chain.ended(JOB)
    assert chain.cancelled(JOB) is False
    chain.reported(JOB, REPORT)
    chain.stop()


class Claims(DeliveryHooks):
    """Claims (or refuses to, with ``refuse``) and records its claim() and unclaim() calls."""

    def __init__(self, name: str, seen: list[str], *, refuse: bool = False, unclaim_fails: bool = False) -> None:
        self.name, self.seen, self.refuse, self.unclaim_fails = name, seen, refuse, unclaim_fails

    def claim(self, job: QueuedJob, instance: object) -> None:
        self.seen.append(f"{self.name}.claim")
        if self.refuse:
            raise AtLimit(1.0, "at its limit")

    def unclaim(self, job: QueuedJob) -> None:
        self.seen.append(f"{self.name}.unclaim")
        if self.unclaim_fails:
            raise OSError("the store is away")


@pytest.mark.logs_errors("kinetis_queue.worker")  # b's unclaim() error, logged once
def test_unclaim_gives_back_in_reverse_order_every_claim_that_returned() -> None:
    seen: list[str] = []
    chain = HookChain([Claims("a", seen), Silent(), Claims("b", seen, unclaim_fails=True), Claims("c", seen)])
    chain.claim(JOB, object())
    chain.unclaim(JOB)  # b's failure is contained: c and a still give back theirs
    assert seen == ["a.claim", "b.claim", "c.claim", "c.unclaim", "b.unclaim", "a.unclaim"]


def test_a_refused_claim_gives_back_the_claims_before_it_at_once_and_propagates() -> None:
    seen: list[str] = []
    chain = HookChain([Claims("a", seen), Claims("b", seen, refuse=True), Claims("c", seen)])
    with pytest.raises(AtLimit):
        chain.claim(JOB, object())
    assert seen == ["a.claim", "b.claim", "a.unclaim"]
