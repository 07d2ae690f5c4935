"""The tables of chains and batches: one row per workflow (nested ones included) and one per member."""

from __future__ import annotations

from django.db import models

from kinetis_queue.validation import JOB_ID_LENGTH, MAX_QUEUE_NAME


class Workflow(models.Model):
    """A chain or a batch (kinetis_queue/workflows); a nested one names its parent and its place there."""

    id = models.CharField(primary_key=True, max_length=32)
    #: "chain" or "batch".
    kind = models.CharField(max_length=5)
    connection = models.CharField(max_length=64)
    queue = models.CharField(max_length=MAX_QUEUE_NAME)
    #: "pending" (a nested one not reached yet), "running", "succeeded", "failed" or "cancelled".
    state = models.CharField(max_length=10)
    #: The outermost workflow of the tree (itself for a top-level one): a tree is queried, cancelled and pruned whole.
    root = models.ForeignKey("self", on_delete=models.CASCADE, related_name="+", db_constraint=False)
    parent = models.ForeignKey("self", null=True, on_delete=models.CASCADE, related_name="children")
    #: Its member index in the parent.
    parent_index = models.IntegerField(null=True)
    #: A batch's on_failure fires at its first member's final failure (True) or once every member settled.
    fail_fast = models.BooleanField(default=True)
    created_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True)

    class Meta:
        app_label = "kinetis_queue"
        db_table = "kinetis_queue_workflows"
        verbose_name = "chain or batch"
        verbose_name_plural = "chains and batches"
        indexes = [models.Index(fields=["root"], name="kinetis_queue_workflow_root")]

    def __str__(self) -> str:
        return f"{self.kind} {self.id}"


class WorkflowMember(models.Model):
    """One member of a workflow: a job, a nested workflow, or a callback (negative index).

    ``spec`` holds what starting the member pushes: a job's envelope (its id fixed when the workflow
    was created), or nothing for a nested workflow, whose own members carry theirs.
    """

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="members")
    #: 0..n-1 in order; the callbacks are -1 (on_success), -2 (on_failure), -3 (on_complete).
    index = models.IntegerField()
    #: "job", "chain", "batch" (then ``child`` is the nested workflow) or "callback".
    kind = models.CharField(max_length=8)
    job_id = models.CharField(max_length=JOB_ID_LENGTH, default="")
    child = models.OneToOneField(Workflow, null=True, on_delete=models.CASCADE, related_name="as_member")
    #: The member's job class path (shown in the admin; never its arguments).
    job_class = models.CharField(max_length=255, default="")
    spec = models.TextField(default="")
    #: "waiting" (not started), "pushing" (its push is due), "queued", "running", "succeeded", "failed", "cancelled".
    state = models.CharField(max_length=10)
    #: Unix seconds when the push was claimed (a "pushing" member older than the grace is pushed again).
    push_claimed_at = models.FloatField(null=True)
    updated_at = models.DateTimeField()

    class Meta:
        app_label = "kinetis_queue"
        db_table = "kinetis_queue_workflow_members"
        verbose_name = "workflow member"
        constraints = [models.UniqueConstraint(fields=["workflow", "index"], name="kinetis_queue_workflow_member_once")]
        indexes = [models.Index(fields=["state", "push_claimed_at"], name="kinetis_queue_member_push")]

    def __str__(self) -> str:
        return f"{self.workflow_id}[{self.index}]"
