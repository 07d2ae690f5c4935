"""How chains and batches move: every state change is one transaction of the Django database.

A workflow tree (a chain or a batch, with the ones nested in it) is written whole when it is
dispatched: a row per workflow and per member, each job member with its envelope and its job id,
fixed then. Starting a member marks it ``pushing``; pushing it and marking it ``queued`` follow.

The order of writes, for stores that cannot share the database's transaction (Redis, SQS, RabbitMQ):
a member's end is written (and what it starts marked ``pushing``) in one transaction, then those
pushes are sent, then marked ``queued``, and only then is the member's delivery acked (the worker
calls ``finish()`` just before the ack or the final fail()). So:

- killed before that transaction commits: nothing was written; the member is redelivered and runs
  again (at-least-once);
- killed after it, before or during the pushes: the member is redelivered (it was not acked), its
  end is found written already, and the pushes still ``pushing`` are sent then; a push that had been
  sent is sent again (the same job id twice: a member may run more than once, never be skipped);
- killed after the pushes, before the ack: the member runs again, and nothing is pushed again.

Any worker also pushes members left ``pushing`` longer than PUSH_GRACE (a dispatch whose process
died between its commit and its pushes): ``recover()``. On the SQL backend storing its jobs in the
same database, the pushes are part of the transaction itself: nothing is pushed twice.

A member counts once, by its row: its first end moves the workflow on; a later delivery of a member
that ended is skipped (``admit()``). Callbacks are members too (negative index), pushed as
``WorkflowCallback`` carriers that take a concurrency slot of their own, so a callback never runs
twice at once and is skipped once it succeeded.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from django.db import router
from django.db.models import QuerySet
from django.utils import timezone

from kinetis_queue import crashpoints
from kinetis_queue.contracts import PreparedPush, Queue
from kinetis_queue.db.transactions import write_atomic
from kinetis_queue.job import Job, job_class_path
from kinetis_queue.payload.envelope import decode_envelope
from kinetis_queue.workflows.jobs import WorkflowCallback
from kinetis_queue.workflows.models import Workflow, WorkflowMember
from kinetis_queue.workflows.spec import Batch, Chain

logger = logging.getLogger("kinetis_queue.workflows")

#: Where a member's envelope metadata names its workflow and index.
METADATA_KEY: Final = "kinetis_queue.workflow"
#: Member states that are final.
FINAL: Final = frozenset(("succeeded", "failed", "cancelled"))
#: A member left "pushing" longer than this (seconds) is pushed again by ``recover()``.
PUSH_GRACE: Final = 60.0
#: The callbacks' member indexes.
CALLBACKS: Final = {"on_success": -1, "on_failure": -2, "on_complete": -3}
#: Crash points of the fault tests (kinetis_queue/crashpoints.py).
AFTER_FINISH: Final = "workflow.finished"
AFTER_PUSHES: Final = "workflow.pushed"


def database() -> str:
    """The Django database of the workflow tables."""
    return router.db_for_write(Workflow)


# -- what a workflow is made of, before it is written ---------------------------------------------


@dataclass
class _Planned:
    """The rows a dispatch writes, with the pushes it can start."""

    workflows: list[Workflow] = field(default_factory=list)
    members: list[WorkflowMember] = field(default_factory=list)


def plan(spec: Chain | Batch, queue: Queue, queue_name: str) -> tuple[_Planned, Workflow]:
    """Check and serialize every job of the tree (push()'s checks, no I/O) and build its rows."""
    planned = _Planned()
    now = timezone.now()
    root = _plan_workflow(spec, queue, queue_name, planned, now, None, None, None)
    return planned, root


def _plan_workflow(
    spec: Chain | Batch,
    queue: Queue,
    queue_name: str,
    planned: _Planned,
    now: Any,
    root: Workflow | None,
    parent: Workflow | None,
    parent_index: int | None,
) -> Workflow:
    if not isinstance(spec, (Chain, Batch)) or isinstance(spec.members, (str, bytes)):
        raise TypeError("a chain or batch takes a list of jobs (Job instances, or nested Chain/Batch)")
    workflow = Workflow(
        id=uuid.uuid4().hex,
        kind="chain" if isinstance(spec, Chain) else "batch",
        connection=queue.connection or "",
        queue=queue_name,
        state="pending",
        parent=parent,
        parent_index=parent_index,
        fail_fast=getattr(spec, "fail_fast", True),
        created_at=now,
    )
    workflow.root = root or workflow
    planned.workflows.append(workflow)
    for index, member in enumerate(spec.members):
        if isinstance(member, (Chain, Batch)):
            row = WorkflowMember(workflow=workflow, index=index, kind="chain" if isinstance(member, Chain) else "batch")
            row.state, row.updated_at = "waiting", now
            planned.members.append(row)
            row.child = _plan_workflow(member, queue, queue_name, planned, now, workflow.root, workflow, index)
        else:
            planned.members.append(_job_member(workflow, index, "job", member, queue, queue_name, now, f"[{index}]"))
    if isinstance(spec, Batch):
        for name, index in CALLBACKS.items():
            job = getattr(spec, name)
            if job is not None:
                carrier = WorkflowCallback.wrapping(workflow.id, name, job)
                planned.members.append(_job_member(workflow, index, "callback", carrier, queue, queue_name, now, name))
    return workflow


def _job_member(
    workflow: Workflow, index: int, kind: str, job: Any, queue: Queue, queue_name: str, now: Any, where: str
) -> WorkflowMember:
    if not isinstance(job, Job):
        raise TypeError(f"workflow member {where} is not a Job (nor a Chain or Batch)")
    try:
        prepared = queue.prepare(job, 0, queue_name)
    except Exception as exc:
        exc.add_note(f"in workflow member {where}")
        raise
    metadata = {**prepared.envelope.metadata, METADATA_KEY: {"id": workflow.id, "i": index}}
    envelope = dataclasses.replace(prepared.envelope, metadata=metadata)
    display = getattr(job, "inner_class", None) if kind == "callback" else None
    display = display if isinstance(display, str) else job_class_path(type(job))
    return WorkflowMember(
        workflow=workflow,
        index=index,
        kind=kind,
        job_id=envelope.id,
        job_class=display,
        spec=envelope.to_json(),
        state="waiting",
        updated_at=now,
    )


# -- the state machine ------------------------------------------------------------------------------


class Transition:
    """The members one transaction started (marked "pushing"), to push once it committed."""

    def __init__(self) -> None:
        self.started: list[WorkflowMember] = []


def start(workflow: Workflow, members: dict[int, WorkflowMember], transition: Transition) -> None:
    """Mark ``workflow`` running and start what it starts: a chain its first member, a batch every one."""
    workflow.state = "running"
    ordered = sorted((m for i, m in members.items() if i >= 0), key=lambda m: m.index)
    if not ordered:
        _ended(workflow, members, transition)
        return
    for member in ordered if workflow.kind == "batch" else ordered[:1]:
        _start_member(member, transition)


def _start_member(member: WorkflowMember, transition: Transition) -> None:
    if member.kind in ("chain", "batch"):
        child = member.child
        assert child is not None
        member.state = "running"
        start(child, _members_of(child), transition)
        child.save(update_fields=["state", "finished_at"])
    else:
        member.state = "pushing"
        member.push_claimed_at = time.time()
        transition.started.append(member)
    member.updated_at = timezone.now()
    member.save(update_fields=["state", "push_claimed_at", "updated_at"])


def _members_of(workflow: Workflow) -> dict[int, WorkflowMember]:
    rows = WorkflowMember.objects.using(database()).select_related("child").filter(workflow=workflow)
    return {member.index: member for member in rows}


def member_ended(member: WorkflowMember, succeeded: bool, transition: Transition) -> None:
    """A member's first end: write it and move its workflow on (the caller holds the workflow's row lock)."""
    member.state = "succeeded" if succeeded else "failed"
    member.updated_at = timezone.now()
    member.save(update_fields=["state", "updated_at"])
    workflow = member.workflow
    if member.kind == "callback" or workflow.state in FINAL:
        return
    members = _members_of(workflow)
    members[member.index] = member
    if workflow.kind == "chain":
        if not succeeded:
            _cancel_waiting(members)
            _ended(workflow, members, transition, failed=True)
            return
        following = [m for i, m in members.items() if i > member.index]
        if following:
            _start_member(min(following, key=lambda m: m.index), transition)
        else:
            _ended(workflow, members, transition)
        return
    jobs = [m for i, m in members.items() if i >= 0]
    failures = [m for m in jobs if m.state == "failed"]
    if not succeeded and workflow.fail_fast:
        _start_callback(members, "on_failure", transition)
    if all(m.state in FINAL for m in jobs):
        _ended(workflow, members, transition, failed=bool(failures))


def _start_callback(members: dict[int, WorkflowMember], name: str, transition: Transition) -> None:
    callback = members.get(CALLBACKS[name])
    if callback is not None and callback.state == "waiting":
        _start_member(callback, transition)


def _cancel_waiting(members: dict[int, WorkflowMember]) -> None:
    now = timezone.now()
    for member in members.values():
        if member.index >= 0 and member.state == "waiting":
            member.state, member.updated_at = "cancelled", now
            member.save(update_fields=["state", "updated_at"])
            if member.child is not None:
                member.child.state, member.child.finished_at = "cancelled", now
                member.child.save(update_fields=["state", "finished_at"])


def _ended(
    workflow: Workflow, members: dict[int, WorkflowMember], transition: Transition, *, failed: bool = False
) -> None:
    """Every member settled (or the chain stopped): the workflow's state, its callbacks, its parent."""
    workflow.state = "failed" if failed else "succeeded"
    workflow.finished_at = timezone.now()
    workflow.save(update_fields=["state", "finished_at"])
    if workflow.kind == "batch":
        _start_callback(members, "on_failure" if failed else "on_success", transition)
        _start_callback(members, "on_complete", transition)
    parent = workflow.parent
    if parent is not None and workflow.parent_index is not None:
        locked = Workflow.objects.using(database()).select_for_update().get(pk=parent.pk)
        slot = (
            WorkflowMember.objects.using(database())
            .select_related("workflow", "child")
            .get(workflow=locked, index=workflow.parent_index)
        )
        if slot.state not in FINAL:
            member_ended(slot, not failed, transition)


# -- pushing ----------------------------------------------------------------------------------------


def push_started(queue: Queue, members: Iterable[WorkflowMember]) -> None:
    """Send the pushes of members marked "pushing", then mark them "queued" (their job ids were fixed)."""
    members = list(members)
    if not members:
        return
    prepared = [PreparedPush(decode_envelope(member.spec), 0, _workflow_queue(member)) for member in members]
    queue.send_many(prepared)
    crashpoints.reach(AFTER_PUSHES)
    WorkflowMember.objects.using(database()).filter(pk__in=[m.pk for m in members], state="pushing").update(
        state="queued", updated_at=timezone.now()
    )


def _workflow_queue(member: WorkflowMember) -> str:
    return member.workflow.queue


def pending_pushes(root_id: str, *, older_than: float | None = None) -> QuerySet[WorkflowMember]:
    """The members of a tree still "pushing" (started, their push not known sent)."""
    rows = (
        WorkflowMember.objects.using(database())
        .select_related("workflow")
        .filter(workflow__root_id=root_id, state="pushing")
    )
    if older_than is not None:
        rows = rows.filter(push_claimed_at__lt=older_than)
    return rows


def shares_transaction(queue: Queue) -> bool:
    """Whether ``queue`` stores its jobs in the workflow tables' database (SQL): its pushes join the transaction."""
    return queue.jobs_database() == database()


# -- the operations ---------------------------------------------------------------------------------

#: Attempts of a transaction the database rolled back (a deadlock, SQLite's busy database).
RETRIES: Final = 5


def _atomic_retrying(work: Any) -> Any:
    """Run ``work()`` in a transaction of the workflow database, again when the database rolled it back."""
    from django.db import OperationalError

    for attempt in range(1, RETRIES + 1):  # pragma: no branch - the last attempt returns or raises
        try:
            with write_atomic(database()):
                return work()
        except OperationalError:
            if attempt == RETRIES:
                raise
            time.sleep(0.01 * attempt)
    raise AssertionError("unreachable")  # pragma: no cover


def dispatch(spec: Chain | Batch, queue: Queue, queue_name: str) -> Workflow:
    """Write the tree, start it, push what it starts; the top workflow's row."""
    planned, root = plan(spec, queue, queue_name)
    shared = shares_transaction(queue)

    def write() -> Transition:
        alias = database()
        # Parents before children: the rows reference each other; the root references itself.
        for workflow in planned.workflows:
            workflow.save(using=alias, force_insert=True)
        WorkflowMember.objects.using(alias).bulk_create(planned.members)
        transition = Transition()
        start(root, {m.index: m for m in planned.members if m.workflow is root}, transition)
        root.save(using=alias, update_fields=["state", "finished_at"])
        if shared:
            push_started(queue, transition.started)
        return transition

    transition = _atomic_retrying(write)
    if not shared:
        push_started(queue, transition.started)
    return root


def finish(queue: Queue, workflow_id: str, index: int, succeeded: bool) -> None:
    """A member's delivery ended (just before its ack or final fail): write it once, then push what it started.

    A member that ended already (a redelivery after a crash) only pushes what is still "pushing" in its tree.
    """
    shared = shares_transaction(queue)

    def write() -> tuple[Workflow | None, Transition]:
        alias = database()
        transition = Transition()
        workflow = Workflow.objects.using(alias).select_for_update().filter(pk=workflow_id).first()
        if workflow is None:
            return None, transition  # pruned, or never written: nothing to move
        member = (
            WorkflowMember.objects.using(alias).select_related("child").filter(workflow=workflow, index=index).first()
        )
        if member is not None and member.state not in FINAL:
            member.workflow = workflow
            member_ended(member, succeeded, transition)
            if shared:
                push_started(queue, transition.started)
        return workflow, transition

    workflow, transition = _atomic_retrying(write)
    crashpoints.reach(AFTER_FINISH)
    if workflow is None or shared:
        return
    if transition.started:
        push_started(queue, transition.started)
    else:  # a member that had ended already: complete what its earlier delivery started
        push_leftovers(queue, workflow.pk)


def push_leftovers(queue: Queue, workflow_id: str) -> None:
    """Push what is still "pushing" in the tree of ``workflow_id``: the pushes a dead delivery left."""
    if shares_transaction(queue):
        return  # those pushes committed with their state
    root = Workflow.objects.using(database()).filter(pk=workflow_id).values_list("root_id", flat=True).first()
    if root is not None:
        push_started(queue, pending_pushes(root))


def recover(queue: Queue, now: float | None = None) -> int:
    """Push the members of this connection left "pushing" for PUSH_GRACE (their pusher died); how many.

    Each is claimed first (a conditional update), so two workers recovering at once push it once.
    """
    cutoff = (time.time() if now is None else now) - PUSH_GRACE
    alias = database()
    stale = (
        WorkflowMember.objects.using(alias)
        .select_related("workflow")
        .filter(state="pushing", push_claimed_at__lt=cutoff, workflow__connection=queue.connection or "")
    )
    claimed = []
    for member in list(stale[:100]):
        taken = (
            WorkflowMember.objects.using(alias)
            .filter(pk=member.pk, state="pushing", push_claimed_at=member.push_claimed_at)
            .update(push_claimed_at=time.time())
        )
        if taken:
            claimed.append(member)
    if claimed:
        logger.warning(
            "Pushing %d workflow member(s) whose push was never confirmed (their pusher died).", len(claimed)
        )
        push_started(queue, claimed)
    return len(claimed)


def cancel(root_id: str) -> list[tuple[str, str]]:
    """Cancel a tree: every workflow and member not ended yet; the (connection, job id) of its members that
    were pushed (queued or running), so their deliveries can be told."""

    def write() -> list[tuple[str, str]]:
        alias = database()
        now = timezone.now()
        workflows = Workflow.objects.using(alias).select_for_update().filter(root_id=root_id)
        open_ids = [w.pk for w in workflows if w.state not in FINAL]
        members = (
            WorkflowMember.objects.using(alias)
            .select_related("workflow")
            .filter(workflow_id__in=open_ids)
            .exclude(state__in=FINAL)
        )
        told = [
            (m.workflow.connection, m.job_id)
            for m in members
            if m.job_id and m.state in ("queued", "running", "pushing")
        ]
        members.update(state="cancelled", updated_at=now)
        Workflow.objects.using(alias).filter(pk__in=open_ids).update(state="cancelled", finished_at=now)
        return told

    told: list[tuple[str, str]] = _atomic_retrying(write)
    return told


def callback_state(state: str, workflow_state: str) -> str:
    """A callback's state as shown: one still "waiting" once its workflow ended never fires (the batch ended
    the other way: on_failure after a success, on_success after a failure), so it reads "skipped"."""
    return "skipped" if state == "waiting" and workflow_state in FINAL else state


def status(root_id: str) -> dict[str, Any]:
    """The top workflow's state and its members' counts per state (callbacks apart), for ``handle.status()``."""
    alias = database()
    workflow = Workflow.objects.using(alias).get(pk=root_id)
    counts = dict.fromkeys(("pending", "running", "succeeded", "failed", "cancelled"), 0)
    for member in (
        WorkflowMember.objects.using(alias).filter(workflow=workflow, index__gte=0).values_list("state", flat=True)
    ):
        counts["pending" if member in ("waiting", "pushing", "queued") else member] += 1
    callbacks = {
        name: callback_state(state, workflow.state)
        for name, index in CALLBACKS.items()
        for state in WorkflowMember.objects.using(alias)
        .filter(workflow=workflow, index=index)
        .values_list("state", flat=True)
    }
    return {
        "id": workflow.pk,
        "kind": workflow.kind,
        "state": workflow.state,
        "total": sum(counts.values()),
        **counts,
        "callbacks": callbacks,
    }


def prune(hours: float, now: Any = None) -> int:
    """Delete the trees whose top workflow ended more than ``hours`` ago (``queue_prune``); how many."""
    from datetime import timedelta

    cutoff = (now or timezone.now()) - timedelta(hours=hours)
    roots = Workflow.objects.using(database()).filter(parent__isnull=True, finished_at__lt=cutoff)
    count = roots.count()
    for root_id in list(roots.values_list("pk", flat=True)):
        Workflow.objects.using(database()).filter(root_id=root_id).delete()
    return count


def counts() -> dict[str, int]:
    """Top-level chains and batches per state (``queue_status``)."""
    rows = Workflow.objects.using(database()).filter(parent__isnull=True).values_list("state", flat=True)
    result = dict.fromkeys(("running", "succeeded", "failed", "cancelled"), 0)
    for state in rows:
        result[state] = result.get(state, 0) + 1
    return result
