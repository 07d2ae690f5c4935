"""Chains and batches on every backend (kinetis_queue/workflows, docs/workflows.md): members in order or
independently, callbacks once, nesting, a member counted once, cancellation, and the sync backend inline."""

from __future__ import annotations

import time
from typing import Any

import pytest

from kinetis_queue import batch, chain
from kinetis_queue.contracts import PreparedPush, Queue
from kinetis_queue.models import Workflow, WorkflowMember
from kinetis_queue.outcomes import JobOutcome, JobReport
from kinetis_queue.payload.envelope import decode_envelope
from kinetis_queue.worker import Worker
from kinetis_queue.workflows import Batch, Chain, WorkflowHandle
from tests import jobs


@pytest.fixture(autouse=True)
def _calls() -> None:
    jobs.CALLS.clear()


def _on(connection: Queue, queue_name: str) -> dict[str, Any]:
    """chain()/batch()'s arguments for the test's connection and queue (SQS: the queue created first)."""
    connection.size(queue_name)
    return {"queue": queue_name, "connection": connection.connection}


def _labels() -> list[str]:
    return [call[1] for call in jobs.CALLS if call[0] in ("Records", "Fails")]


def _work_until(queue: Queue, queue_name: str, handle: WorkflowHandle, *, limit: int = 60) -> list[JobReport]:
    """Run deliveries until the workflow ended (and nothing is left to pop briefly)."""
    reports: list[JobReport] = []
    worker = Worker(queue, recorder=None, reporter=reports.append)
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and len(reports) < limit:
            if not worker.process_next(0.5, [queue_name]) and handle.status()["state"] != "running":
                break
    finally:
        worker.close()
    return reports


pytestmark = pytest.mark.trait("stores_jobs")


def test_a_chain_runs_its_members_in_order(connection: Queue, queue_name: str) -> None:
    handle = chain(
        [jobs.Records("one"), jobs.Records("two"), jobs.Records("three")],
        **_on(connection, queue_name),
    )
    assert handle.status()["state"] == "running" and handle.status()["pending"] == 3
    assert connection.size(queue_name) == 1  # only the first member is pushed

    _work_until(connection, queue_name, handle)

    assert _labels() == ["one", "two", "three"]
    status = handle.status()
    assert (status["state"], status["succeeded"], status["total"]) == ("succeeded", 3, 3)


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_member_that_fails_for_good_stops_the_chain(connection: Queue, queue_name: str) -> None:
    handle = chain(
        [jobs.Records("one"), jobs.Fails("two"), jobs.Records("three")],
        **_on(connection, queue_name),
    )

    _work_until(connection, queue_name, handle)

    assert _labels() == ["one", "two"]
    status = handle.status()
    assert (status["state"], status["succeeded"], status["failed"], status["cancelled"]) == ("failed", 1, 1, 1)


def test_a_batch_runs_every_member_and_fires_on_success_and_on_complete_once(
    connection: Queue, queue_name: str
) -> None:
    handle = batch(
        [jobs.Records(f"m{n}") for n in range(5)],
        on_success=jobs.Records("success"),
        on_failure=jobs.Records("failure"),
        on_complete=jobs.Records("complete"),
        **_on(connection, queue_name),
    )
    assert connection.size(queue_name) == 5

    _work_until(connection, queue_name, handle)

    labels = _labels()
    assert sorted(labels[:5]) == [f"m{n}" for n in range(5)]
    assert sorted(labels[5:]) == ["complete", "success"]
    status = handle.status()
    assert (status["state"], status["succeeded"]) == ("succeeded", 5)
    # Issue 27 item 24: on_failure will never fire once the batch succeeded: "skipped", not "waiting".
    assert status["callbacks"] == {"on_success": "succeeded", "on_failure": "skipped", "on_complete": "succeeded"}


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_failing_member_fires_on_failure_once_and_on_complete_when_all_settled(
    connection: Queue, queue_name: str
) -> None:
    handle = batch(
        [jobs.Records("a"), jobs.Fails("b"), jobs.Fails("c"), jobs.Records("d")],
        on_success=jobs.Records("success"),
        on_failure=jobs.Records("failure"),
        on_complete=jobs.Records("complete"),
        **_on(connection, queue_name),
    )

    _work_until(connection, queue_name, handle)

    labels = _labels()
    assert labels.count("failure") == 1 and labels.count("complete") == 1 and "success" not in labels
    assert labels.index("complete") > max(labels.index(x) for x in "abcd")
    status = handle.status()
    assert status["state"] == "failed"
    assert status["callbacks"]["on_success"] == "skipped"  # a failed batch never fires it: not "waiting"


def test_chains_and_batches_nest(connection: Queue, queue_name: str) -> None:
    """chain([A, Batch([B, C], on_success=D), E]): A first, B and C after it, E once both ended, D once too."""
    handle = chain(
        [
            jobs.Records("A"),
            Batch([jobs.Records("B"), Chain([jobs.Records("C1"), jobs.Records("C2")])], on_success=jobs.Records("D")),
            jobs.Records("E"),
        ],
        **_on(connection, queue_name),
    )

    _work_until(connection, queue_name, handle)

    labels = _labels()
    assert sorted(labels) == sorted(["A", "B", "C1", "C2", "D", "E"])
    position = {label: labels.index(label) for label in labels}
    assert position["A"] < min(position["B"], position["C1"]) and position["C1"] < position["C2"]
    assert position["E"] > max(position["B"], position["C2"]) and position["D"] > max(position["B"], position["C2"])
    assert handle.status()["state"] == "succeeded"
    assert Workflow.objects.filter(root_id=handle.id).count() == 3


def test_a_member_delivered_twice_counts_once(connection: Queue, queue_name: str) -> None:
    """A copy of a member that succeeded (the same id and metadata, as a redelivery after a crash would be)
    is skipped: it does not run again, and the batch's callback fires once."""
    handle = batch([jobs.Records("only")], on_success=jobs.Records("success"), **_on(connection, queue_name))
    member = WorkflowMember.objects.get(workflow_id=handle.id, index=0)
    copy = PreparedPush(decode_envelope(member.spec), 0, queue_name)

    _work_until(connection, queue_name, handle)
    connection.send(copy)
    reports = _work_until(connection, queue_name, handle, limit=1)

    assert [(r.job_id, r.outcome) for r in reports] == [(member.job_id, JobOutcome.SKIPPED)]
    assert _labels() == ["only", "success"]
    assert handle.status()["succeeded"] == 1


def test_cancel_stops_a_chain_whose_first_member_ran(connection: Queue, queue_name: str) -> None:
    handle = chain([jobs.Records("one"), jobs.Records("two")], **_on(connection, queue_name))
    _work_until(connection, queue_name, handle, limit=1)

    assert handle.cancel() is True

    _work_until(connection, queue_name, handle)
    assert _labels() == ["one"]
    status = handle.status()
    assert (status["state"], status["succeeded"], status["cancelled"]) == ("cancelled", 1, 1)


def test_a_bad_member_is_refused_before_anything_is_written(connection: Queue, queue_name: str) -> None:
    before = Workflow.objects.count()
    with pytest.raises(TypeError, match="workflow member \\[1\\] is not a Job"):
        chain([jobs.Records("ok"), "not a job"], **_on(connection, queue_name))  # type: ignore[list-item]
    with pytest.raises(Exception, match="in workflow member \\[0\\]"):
        batch([jobs.Records(object())], **_on(connection, queue_name))  # type: ignore[arg-type]
    assert Workflow.objects.count() == before
    assert connection.size(queue_name) == 0


def test_the_sync_backend_runs_a_chain_inline_and_raises_a_failing_members_error(queue_name: str) -> None:
    handle = chain([jobs.Records("one"), jobs.Records("two")], queue=queue_name, connection="sync")
    assert _labels() == ["one", "two"] and handle.status()["state"] == "succeeded"

    jobs.CALLS.clear()
    with pytest.raises(RuntimeError, match="deliberate failure"):
        chain([jobs.Fails("bad"), jobs.Records("never")], queue=queue_name, connection="sync")
    assert _labels() == ["bad"]

    jobs.CALLS.clear()
    done = batch(
        [jobs.Records("a"), jobs.Fails("b")], on_failure=jobs.Records("failure"), queue=queue_name, connection="sync"
    )
    assert sorted(_labels()) == ["a", "b", "failure"] and done.status()["state"] == "failed"


def test_cancel_tells_a_running_member(connection: Queue, queue_name: str) -> None:
    """A workflow's cancel() cancels its pushed members' jobs (kinetis_queue.control): the running one
    sees ``context.cancelled`` and stops, and no callback fires."""
    import threading

    from tests.support.helpers import wait_until

    handle = batch(
        [jobs.LoopsUntilCancelled(limit=30)], on_complete=jobs.Records("complete"), **_on(connection, queue_name)
    )
    member = WorkflowMember.objects.get(workflow_id=handle.id, index=0)
    reports: list[JobReport] = []
    worker = Worker(connection, recorder=None, reporter=reports.append)
    runner = threading.Thread(target=worker.process_next, args=(5, [queue_name]))
    runner.start()
    try:
        wait_until(lambda: ("LoopsUntilCancelled", "started", member.job_id) in jobs.CALLS)
        assert handle.cancel() is True
        wait_until(lambda: ("LoopsUntilCancelled", "cancelled", member.job_id) in jobs.CALLS, timeout=15)
    finally:
        runner.join(30)
        worker.close()
    assert ("LoopsUntilCancelled", "ran out", member.job_id) not in jobs.CALLS
    assert handle.status()["state"] == "cancelled"
    assert _work_until(connection, queue_name, handle, limit=1) == [] and _labels() == []
