"""Weighted queues and per-queue slots in one worker (queue_work --queue emails:4,reports:1 and --queue
emails=8,reports=2; worker/turns.py, the dispatcher): while both queues have work the worker takes their jobs in
proportion to their weights, spread out; a queue without work passes its turn; strict order stays the default; a
queue with slots never runs more of its jobs at once than it has slots."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from kinetis_queue.contracts import Queue
from kinetis_queue.exceptions import InvalidQueueArgumentError
from kinetis_queue.outcomes import JobReport
from kinetis_queue.worker import ExitReason, Worker
from kinetis_queue.worker.turns import Turns, parse_queues, parse_weights
from tests import concurrency_jobs as cj
from tests import jobs
from tests.support.helpers import in_thread, wait_until

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
    # 20:5, within a turn's batch either way. RabbitMQ pushes deliveries ahead: a turn whose queue's deliveries have
    # not arrived yet passes to the other queue, so there the weighted queue is only favoured (17:8 seen under load).
    low, high = (13, 25) if connection.backend_name == "rabbitmq" else (18, 22)
    assert low <= counts[0] <= high and counts[0] + counts[1] == 25
    assert reports in taken[:10]  # spread out: the light queue is not left to the end
    _drain(connection, [emails, reports])


def test_without_weights_the_first_queue_with_work_wins(connection: Queue, queue_name: str) -> None:
    high, low = f"{queue_name}-high", f"{queue_name}-low"
    connection.push_many([jobs.Noop() for _ in range(5)], queue=high)
    connection.push_many([jobs.Noop() for _ in range(5)], queue=low)
    taken = _taken(connection, [high, low], 10, None)
    if connection.backend_name == "rabbitmq":  # deliveries arrive ahead: strict order holds for what has arrived
        assert sorted(taken) == sorted([high] * 5 + [low] * 5)  # (fresh-clone run ci5, rabbitmq-quorum, loaded)
    else:
        assert taken == [high] * 5 + [low] * 5


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


def test_each_queue_runs_at_most_its_slots_at_once(connection: Queue, queue_name: str) -> None:
    """--queue a=1,b=2: while a's one job holds its slot, a's second waits though the worker has a free slot, and
    b's jobs run beside it; once the first ends, the second runs."""
    cj.reset()
    one, two = f"{queue_name}-a", f"{queue_name}-b"
    connection.push(cj.HoldsUntil("a1"), queue=one)
    connection.push(cj.HoldsUntil("a2"), queue=one)
    connection.push_many([cj.Started("b1"), cj.Started("b2")], queue=two)
    worker = Worker(connection, recorder=None, concurrency=3)
    seen: list[list[str]] = []

    def then() -> None:
        try:
            wait_until(lambda: {"a1", "b1", "b2"} <= set(cj.STARTED))
            wait_until(lambda: worker.processed >= 2)  # b's two settled while a1 still holds a's only slot
            seen.append(sorted(cj.STARTED))
        finally:
            cj.HOLD.set()

    helper = in_thread(then)
    try:
        assert worker.run(5, [one, two], max_jobs=4, slots={one: 1, two: 2}) is ExitReason.MAX_JOBS
    finally:
        cj.HOLD.set()
        worker.close()
    helper.join()
    assert seen == [["a1", "b1", "b2"]]  # a2 had not started: a's one slot was taken
    assert sorted(cj.STARTED) == ["a1", "a2", "b1", "b2"]


def test_slots_must_name_every_queue_and_fit_the_concurrency(connection: Queue, queue_name: str) -> None:
    worker = Worker(connection, recorder=None, concurrency=2)
    try:
        with pytest.raises(InvalidQueueArgumentError, match="every watched queue"):
            worker.run(1, ["a", "b"], slots={"a": 1})
        with pytest.raises(InvalidQueueArgumentError, match="add up to 3, more than the worker's concurrency"):
            worker.run(1, ["a", "b"], slots={"a": 1, "b": 2})
    finally:
        worker.close()


def test_slots_are_given_to_every_queue_or_none() -> None:
    assert parse_queues(["a=8", "b:2=2"]) == (("a", "b"), {"a": 1, "b": 2}, {"a": 8, "b": 2})
    with pytest.raises(ValueError, match="queue 'b' has no slots"):
        parse_queues(["a=8", "b"])
    with pytest.raises(ValueError, match="the slots of queue 'a' must be a whole number from 1 to 256"):
        parse_queues(["a=0"])


def test_queue_work_takes_its_concurrency_from_the_slots() -> None:
    with pytest.raises(CommandError, match=r"--concurrency is the sum of the queues' slots \(3\)"):
        call_command(
            "queue_work", "--queue=emails=2,reports=1", "--concurrency=5", "--once", stdout=io.StringIO(),
            stderr=io.StringIO(),
        )  # fmt: skip
    with pytest.raises(CommandError, match="queue 'reports' has no slots"):
        call_command("queue_work", "--queue=emails=2,reports", "--once", stdout=io.StringIO(), stderr=io.StringIO())
