"""Weighted queues in one worker (queue_work --queue emails:4,reports:1, worker/turns.py): while both queues have
work the worker takes their jobs in proportion to their weights, spread out; a queue without work passes its turn;
strict order stays the default."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from kinetis_queue.contracts import Queue
from kinetis_queue.outcomes import JobReport
from kinetis_queue.worker import ExitReason, Worker
from kinetis_queue.worker.turns import Turns, parse_weights
from tests import jobs

pytestmark = pytest.mark.trait("stores_jobs")


def _taken(connection: Queue, queues: list[str], n: int, weights: dict[str, int] | None) -> list[str]:
    reports: list[JobReport] = []
    worker = Worker(connection, recorder=None, reporter=reports.append)
    try:
        assert worker.run(5, queues, max_jobs=n, weights=weights) is ExitReason.MAX_JOBS
    finally:
        worker.close()
    return [report.queue for report in reports]


def test_weighted_queues_take_turns_in_proportion(connection: Queue, queue_name: str) -> None:
    emails, reports = f"{queue_name}-emails", f"{queue_name}-reports"
    connection.push_many([jobs.Noop() for _ in range(40)], queue=emails)
    connection.push_many([jobs.Noop() for _ in range(40)], queue=reports)

    taken = _taken(connection, [emails, reports], 25, {emails: 4, reports: 1})

    counts = (taken.count(emails), taken.count(reports))
    print(f"\n[{connection.backend_name}] 25 jobs taken with weights 4:1: {counts}")
    assert 18 <= counts[0] <= 22 and counts[0] + counts[1] == 25  # 20:5, within a turn's batch either way
    assert reports in taken[:10]  # spread out: the light queue is not left to the end
    _drain(connection, [emails, reports])


def test_without_weights_the_first_queue_with_work_wins(connection: Queue, queue_name: str) -> None:
    high, low = f"{queue_name}-high", f"{queue_name}-low"
    connection.push_many([jobs.Noop() for _ in range(5)], queue=high)
    connection.push_many([jobs.Noop() for _ in range(5)], queue=low)
    assert _taken(connection, [high, low], 10, None) == [high] * 5 + [low] * 5


def _drain(connection: Queue, queues: list[str]) -> None:
    worker = Worker(connection, recorder=None)
    try:
        worker.run(1, queues, stop_when_empty=True)
    finally:
        worker.close()


def test_turns_are_smooth_charged_per_job_and_capped() -> None:
    turns = Turns({"e": 4, "r": 1})
    picked = []
    for _ in range(10):
        first = turns.order(["e", "r"])[0]
        picked.append(first)
        turns.charge([first])
    assert "".join(picked) == "eereeeeree"  # 4:1, spread out
    three = Turns({"a": 2, "b": 1, "c": 1})
    order = []
    for _ in range(8):
        first = three.order(["a", "b", "c"])[0]
        order.append(first)
        three.charge([first])
    assert "".join(order) == "abcaabca"
    assert turns.first_share(["e", "r"]) == 4 and turns.first_share(["r", "e"]) == 1
    # An hour of e alone (r had no work): r is owed at most one round, not an hour of turns.
    for _ in range(1000):
        turns.charge(["e"])
    order = []
    for _ in range(5):
        first = turns.order(["e", "r"])[0]
        order.append(first)
        turns.charge([first])
    assert order.count("r") <= 2


@pytest.mark.parametrize(
    ("entries", "problem"),
    [(["a:0"], "from 1 to 100"), (["a:x"], "from 1 to 100"), (["a:101"], "from 1 to 100"), (["a:-1"], "from 1")],
)
def test_a_bad_weight_names_its_queue(entries: list[str], problem: str) -> None:
    with pytest.raises(ValueError, match=f"the weight of queue 'a' must be a whole number {problem}"):
        parse_weights(entries)


def test_weights_default_to_one_and_strict_order_has_none() -> None:
    assert parse_weights(["a", "b"]) == (("a", "b"), {})
    assert parse_weights(["a:3", "b"]) == (("a", "b"), {"a": 3, "b": 1})


@pytest.mark.parametrize("given", ["emails:0", "emails:x,reports", "emails:4,emails:1"])
def test_queue_work_refuses_a_bad_weighted_list_before_it_starts(given: str) -> None:
    with pytest.raises(CommandError, match=r"weight of queue 'emails'|repeated|more than once"):
        call_command("queue_work", f"--queue={given}", "--once", stdout=io.StringIO(), stderr=io.StringIO())
