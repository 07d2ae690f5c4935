"""push_many() of unique jobs only, on every storing backend (kinetis_queue/contracts.py ``send_many``): nothing
goes through the batch, each job through its lock, and a batch's duplicates collapse to the first's id."""

from __future__ import annotations

import pytest

from kinetis_queue.contracts import Queue
from tests import jobs

pytestmark = pytest.mark.trait("stores_jobs")


def test_push_many_of_unique_jobs_only_sends_each_through_its_lock(connection: Queue, queue_name: str) -> None:
    ids = connection.push_many([jobs.Unique("a"), jobs.Unique("b"), jobs.Unique("a")], queue=queue_name)

    assert ids[0] == ids[2] and len(set(ids)) == 2
    assert connection.size(queue_name) == 2
    assert connection.push(jobs.Unique("b"), queue=queue_name) == ids[1]  # each key is held by its job
