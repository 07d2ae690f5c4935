"""queue_status counts chains and batches; queue_prune removes the trees that ended more than --hours ago."""

from __future__ import annotations

import io
import json
from datetime import timedelta

from django.core.management import call_command
from django.utils import timezone

from kinetis_queue import batch, chain
from kinetis_queue.models import Workflow, WorkflowMember
from tests import jobs


def test_queue_status_counts_the_top_level_chains_and_batches(queue_name: str) -> None:
    running = chain([jobs.Records("a"), jobs.Records("b")], queue=queue_name, connection="sqlite")
    done = batch([jobs.Records("c")], queue=queue_name, connection="sync")

    out = io.StringIO()
    call_command("queue_status", "--connection=sqlite", "--json", stdout=out)
    counts = json.loads(out.getvalue())["workflows"]
    assert counts["running"] >= 1 and counts["succeeded"] >= 1
    table = io.StringIO()
    call_command("queue_status", "--connection=sqlite", stdout=table)
    assert "Chains and batches: " in table.getvalue() and " running" in table.getvalue()
    assert {running.status()["state"], done.status()["state"]} == {"running", "succeeded"}


def test_queue_prune_removes_ended_trees_older_than_the_hours_and_keeps_the_rest(queue_name: str) -> None:
    old = batch([jobs.Records("x"), batch_member()], queue=queue_name, connection="sync")
    recent = chain([jobs.Records("y")], queue=queue_name, connection="sync")
    running = chain([jobs.Records("z")], queue=queue_name, connection="sqlite")
    Workflow.objects.filter(root_id=old.id).update(finished_at=timezone.now() - timedelta(hours=200))

    out = io.StringIO()
    call_command("queue_prune", stdout=out)

    assert "chain(s) and batch(es) that ended more than 168 hour(s) ago" in out.getvalue()
    assert not Workflow.objects.filter(root_id=old.id).exists()
    assert not WorkflowMember.objects.filter(workflow__root_id=old.id).exists()
    assert Workflow.objects.filter(pk=recent.id).exists() and Workflow.objects.filter(pk=running.id).exists()


def batch_member() -> object:
    from kinetis_queue.workflows import Chain

    return Chain([jobs.Records("nested")])
