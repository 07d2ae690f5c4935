"""A snooze whose ack is refused as stale: reported lost, and the job is still there to be worked."""

from __future__ import annotations

from typing import Any

import pytest

from kinetis_queue import JobContext
from kinetis_queue.contracts import JobSettlement, Queue
from kinetis_queue.job import Snooze
from kinetis_queue.worker import Worker
from tests import jobs
from tests.support.backends import Backend
from tests.support.helpers import steal_reservation


@pytest.mark.trait("fenced")
def test_a_snooze_whose_ack_is_stale_is_reported_lost_and_its_replacement_is_kept(
    connection: Queue, queue_name: str, outcomes: list[tuple[str, dict[str, Any]]], backend: Backend
) -> None:
    """Contract: the replacement is stored before the ack; a stale ack makes the outcome LOST, not RELEASED."""
    job_id = connection.push(jobs.CallsBack(), queue=queue_name, max_attempts=3)

    def steal_then_snooze(context: JobContext) -> None:
        steal_reservation(backend, context.id)
        raise Snooze(0, "not yet")

    jobs.CALLBACK[:] = [steal_then_snooze]
    worker = Worker(connection, recorder=None)
    assert worker.process_next(5, [queue_name]) is True
    worker.close()
    assert [name for name, _ in outcomes] == ["job_settlement_lost"]
    lost = outcomes[0][1]
    assert lost["operation"] is JobSettlement.ACK
    assert lost["job"].id == job_id
    assert lost["exception"] is None
    # Never none: a delivery of the job is still there to be worked.
    replacement = connection.pop(5, [queue_name])
    assert replacement is not None and replacement.id == job_id
    connection.ack(replacement)
