"""Cancelling a chain or batch on SQL costs a fixed number of statements, whatever its member count (issue 27, item 8).

The jobs table has no index on ``job_id`` (push and ack are the hot paths), so each statement that looks a
job up by its id reads the table: one read per member made the admin's Cancel take about 29 ms per member
at 100k rows. ``Queue.withdraw_many()`` looks every member up in one statement.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

import pytest
from django.db import connections as db_connections
from django.test.utils import CaptureQueriesContext

from kinetis_queue import batch, chain
from kinetis_queue import connections as queue_connections
from kinetis_queue.control.models import Cancellation
from tests.jobs import Noop

#: The SQL connections of tests/settings.py and their database aliases.
SQL = {"sqlite": "default", "postgres": "postgres", "mariadb": "mariadb"}


def _cancel_queries(name: str, queue_name: str, members: int, workflow: Any = batch) -> int:
    """Dispatch a batch (or chain) of ``members`` jobs, reserve one of them, cancel it: the queries the cancel
    ran on every database alias; checks that the waiting members were removed and the reserved one was told."""
    queue = queue_connections.queues[name]
    handle = workflow([Noop() for _ in range(members)], queue=queue_name, connection=name)
    held = queue.pop(5, [queue_name])
    assert held is not None
    with ExitStack() as stack:
        captured = [stack.enter_context(CaptureQueriesContext(db_connections[alias])) for alias in SQL.values()]
        assert handle.cancel() is True
    assert queue.size(queue_name) == 0  # every waiting member is gone: only the reserved one is left
    assert Cancellation.objects.filter(job_id=held.id).exists()  # and its worker is told
    queue.ack(held)
    return sum(len(capture.captured_queries) for capture in captured)


@pytest.mark.parametrize("name", list(SQL))
def test_cancelling_a_batch_runs_as_many_queries_for_twelve_members_as_for_three(name: str, queue_name: str) -> None:
    few = _cancel_queries(name, queue_name, 3)
    many = _cancel_queries(name, queue_name + "-many", 12)
    assert many == few


@pytest.mark.parametrize("name", list(SQL))
def test_cancelling_a_chain_runs_as_many_queries_for_twelve_members_as_for_three(name: str, queue_name: str) -> None:
    few = _cancel_queries(name, queue_name, 3, chain)
    many = _cancel_queries(name, queue_name + "-many", 12, chain)
    assert many == few
