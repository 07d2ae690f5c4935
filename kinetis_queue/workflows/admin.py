"""The admin's chains and batches: a list of the top-level ones, a read-only page per workflow, and Cancel.

It follows the failed-jobs admin (kinetis_queue/admin/__init__.py). Never an argument value: a member is shown
by its ``job_class`` column (a display name), never by ``WorkflowMember.spec``, which holds the job's
envelope, and the changelist accepts only the parameters its list filters send (``lookup_allowed``),
with search on the id alone. Every operation asks for a model permission: the pages "view", Cancel
"change" (a workflow is never edited, so "change" means "may cancel", as it means "may retry" for a
failed job). Cancel, on the page of a running top-level workflow or as a bulk action, goes through a
confirmation page (a GET never changes anything), cancels through ``WorkflowHandle.cancel()`` and
writes a LogEntry per workflow it cancelled. Nothing is added, changed or deleted here (``queue_prune``
removes ended trees).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.contrib.admin import FieldListFilter
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.html import format_html
from django.utils.text import capfirst

from kinetis_queue.admin.pages import AdminPages
from kinetis_queue.workflows import engine, handle
from kinetis_queue.workflows.models import Workflow, WorkflowMember

if TYPE_CHECKING:
    from django.contrib.admin.views.main import ChangeList

#: The callbacks' names by member index (engine.CALLBACKS turned round), in the order a page lists them.
CALLBACK_NAMES = {index: name for name, index in engine.CALLBACKS.items()}
#: The most members a detail page lists (a batch may have thousands; the progress line counts them all).
MEMBERS_SHOWN = 500
#: How many of an id's 32 hex digits the list shows: enough to tell one from another, and to search by.
ID_SHOWN = 8
#: Where the changelist leaves each row's Progress, counted for the whole page at once.
PROGRESS_ATTRIBUTE = "_kinetis_queue_progress"


@dataclass(frozen=True)
class Progress:
    """A workflow's own members per final state (callbacks apart; a nested workflow counts as one member)."""

    total: int = 0
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0

    @property
    def ended(self) -> int:
        return self.succeeded + self.failed + self.cancelled


def progress_of(workflow_ids: Iterable[str]) -> dict[str, Progress]:
    """The Progress of each workflow, in one query over the members' states (never their spec)."""
    tallies: dict[str, dict[str, int]] = {}
    rows = (
        WorkflowMember.objects.using(engine.database())
        .filter(workflow_id__in=list(workflow_ids), index__gte=0)
        .values_list("workflow_id", "state")
        .annotate(n=Count("id"))
        .order_by()
    )
    for workflow_id, state, n in rows:
        tally = tallies.setdefault(workflow_id, {})
        tally[state] = tally.get(state, 0) + n
    return {
        workflow_id: Progress(
            total=sum(tally.values()),
            succeeded=tally.get("succeeded", 0),
            failed=tally.get("failed", 0),
            cancelled=tally.get("cancelled", 0),
        )
        for workflow_id, tally in tallies.items()
    }


@dataclass(frozen=True)
class MemberLine:
    """One line of a detail page's members or callbacks table: what the member runs, never its arguments."""

    index: int
    name: str
    kind: str
    runs: str
    url: str
    job_id: str
    state: str
    updated_at: datetime


@admin.register(Workflow)
class WorkflowAdmin(AdminPages):
    list_display = (
        "id_shown",
        "kind",
        "connection_shown",
        "queue",
        "state_shown",
        "progress",
        "created_shown",
        "finished_shown",
    )
    list_display_links = ("id_shown",)
    #: Field names only: lookup_allowed() derives the accepted URL parameters from these.
    list_filter = ("state", "kind", "connection")
    #: The id only (a prefix of it will do): nothing a member holds is searched.
    search_fields = ("^id",)
    ordering = ("-created_at", "-id")
    actions = ("cancel_selected",)
    #: The detail page's lines, a few fields each, so that the members table comes into view.
    fields = (
        ("id_full", "kind", "state_shown"),
        ("progress", "on_failure_fires"),
        ("connection_shown", "queue"),
        ("created_shown", "finished_shown"),
        ("parent_link", "top_link"),
    )
    readonly_fields = tuple(name for line in fields for name in line)

    _filter_parameters: frozenset[str] | None = None

    # -- permissions: a workflow is never added, edited or deleted here ----------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Workflow | None = None) -> bool:
        # "change" is the cancel permission; a workflow itself is read-only, so its page is a view.
        return obj is None and super().has_change_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj: Workflow | None = None) -> bool:
        return False  # queue_prune removes ended trees, whole

    # -- what is listed and found --------------------------------------------------------------------

    def _workflows(self) -> QuerySet[Workflow]:
        """Every workflow, read from the database the engine writes them to (router.db_for_write)."""
        return Workflow.objects.using(engine.database())

    def get_queryset(self, request: HttpRequest) -> QuerySet[Workflow]:
        """The changelist's rows, and so the bulk action's: top-level workflows only."""
        return self._workflows().filter(parent__isnull=True)

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Workflow | None:
        """Any workflow, nested ones included: a nested one's page is reached from its parent's."""
        try:
            return self._workflows().select_related("parent", "root").get(pk=object_id)
        except (Workflow.DoesNotExist, ValidationError, ValueError):
            return None

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        """Only a parameter one of the list filters sends (as FailedJobAdmin): ``?members__spec__contains=<guess>``
        would answer with a row count whether a guessed argument value is stored."""
        if self._filter_parameters is None:
            allowed: set[str] = set()
            for name in self.list_filter:
                assert isinstance(name, str), "list_filter holds field names only"
                field = self.opts.get_field(name)
                spec = FieldListFilter.create(field, request, {}, self.model, self, field_path=name)  # type: ignore[arg-type]
                allowed.update(parameter for parameter in spec.expected_parameters() or () if parameter)
            self._filter_parameters = frozenset(allowed)
        return lookup in self._filter_parameters

    def get_changelist_instance(self, request: HttpRequest) -> ChangeList:
        """The changelist, its page's progress counted in one query rather than one per row."""
        changelist = super().get_changelist_instance(request)
        rows = list(changelist.result_list)
        counted = progress_of(row.pk for row in rows)
        for row in rows:
            setattr(row, PROGRESS_ATTRIBUTE, counted.get(row.pk, Progress()))
        return changelist

    # -- columns and detail fields ---------------------------------------------------------------------

    @admin.display(description="id")
    def id_shown(self, obj: Workflow) -> str:
        """The id's first ID_SHOWN digits (search takes a prefix), the whole id in the title; the page has it all."""
        return format_html('<code class="workflow-id" title="{}">{}</code>', obj.pk, obj.pk[:ID_SHOWN])

    @admin.display(description="id")
    def id_full(self, obj: Workflow) -> str:
        return format_html("<code>{}</code>", obj.pk)

    @admin.display(description="connection", ordering="connection")
    def connection_shown(self, obj: Workflow) -> str:
        return obj.connection or "(default)"

    @admin.display(description="state", ordering="state")
    def state_shown(self, obj: Workflow) -> str:
        return format_html('<span class="workflow-state workflow-state-{}">{}</span>', obj.state, obj.state)

    @admin.display(description="progress")
    def progress(self, obj: Workflow) -> str:
        """``ended/total`` of its own members, then how many succeeded, failed and were cancelled."""
        shown = getattr(obj, PROGRESS_ATTRIBUTE, None)
        if not isinstance(shown, Progress):
            shown = progress_of([obj.pk]).get(obj.pk, Progress())
        return format_html(
            '<span class="workflow-progress"><strong>{}/{}</strong> <span>{} succeeded,</span> <span>{} failed,</span>'
            " <span>{} cancelled</span></span>",
            shown.ended,
            shown.total,
            shown.succeeded,
            shown.failed,
            shown.cancelled,
        )

    @admin.display(description="created", ordering="created_at")
    def created_shown(self, obj: Workflow) -> str:
        return _when(obj.created_at)

    @admin.display(description="finished", ordering="finished_at")
    def finished_shown(self, obj: Workflow) -> str:
        return _when(obj.finished_at)

    @admin.display(description="when on_failure fires")
    def on_failure_fires(self, obj: Workflow) -> str:
        if obj.kind != "batch":
            return "-"
        return "at the first member that fails for good" if obj.fail_fast else "once every member settled"

    @admin.display(description="parent")
    def parent_link(self, obj: Workflow) -> str:
        return self._link(obj.parent) if obj.parent is not None else "- (a top-level workflow)"

    @admin.display(description="top workflow")
    def top_link(self, obj: Workflow) -> str:
        return self._link(obj.root) if obj.root_id != obj.pk else "- (this one)"

    def _link(self, workflow: Workflow) -> str:
        return format_html('<a href="{}">{} {}</a>', self._url("change", workflow.pk), workflow.kind, workflow.pk)

    # -- the detail page -------------------------------------------------------------------------------

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        workflow = self.get_object(request, unquote(object_id))
        context: dict[str, Any] = {**(extra_context or {}), "show_delete": False}
        if workflow is not None:
            members, callbacks, total = self._member_lines(workflow)
            context.update(
                members=members,
                members_total=total,
                members_cut=total > len(members),
                callbacks=callbacks,
                is_batch=workflow.kind == "batch",
                can_cancel=(
                    workflow.parent_id is None
                    and workflow.state not in engine.FINAL
                    and self.has_change_permission(request)
                ),
            )
        return super().change_view(request, object_id, form_url, context)

    def _member_lines(self, workflow: Workflow) -> tuple[list[MemberLine], list[MemberLine], int]:
        """The members (the first MEMBERS_SHOWN, in order), the callbacks, and how many members there are."""
        rows = (
            WorkflowMember.objects.using(engine.database())
            .filter(workflow_id=workflow.pk)
            .select_related("child")
            .defer("spec")  # the job's envelope: never read, never shown
        )
        members = [self._line(row) for row in rows.filter(index__gte=0).order_by("index")[:MEMBERS_SHOWN]]
        callbacks = [self._line(row, workflow.state) for row in rows.filter(index__lt=0).order_by("-index")]
        total = rows.filter(index__gte=0).count() if len(members) == MEMBERS_SHOWN else len(members)
        return members, callbacks, total

    def _line(self, row: WorkflowMember, workflow_state: str = "") -> MemberLine:
        child = row.child
        return MemberLine(
            index=row.index,
            name=CALLBACK_NAMES.get(row.index, str(row.index)),
            kind=row.kind,
            runs=f"{child.kind} {child.pk}" if child is not None else (row.job_class or "-"),
            url=self._url("change", child.pk) if child is not None else "",
            job_id=row.job_id,
            state=engine.callback_state(row.state, workflow_state) if row.index < 0 else row.state,
            updated_at=timezone.localtime(row.updated_at),
        )

    # -- Cancel: the bulk action and the detail page's button, both through a confirmation --------------

    def _cancel(self, request: HttpRequest, workflow: Workflow) -> bool:
        """Cancel one top-level workflow through its handle, and a history entry when it did."""
        if workflow.state in engine.FINAL or not handle(workflow.pk).cancel():
            return False
        self.log_change(request, workflow, "Cancelled.")
        return True

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        # A POST of the cancel action by one who may not cancel is refused outright (Django would ignore it).
        if request.method == "POST" and request.POST.get("action") == "cancel_selected":
            if not self.has_change_permission(request):
                raise PermissionDenied
        # Not Django's "Select chain or batch to change": nothing here is changed.
        return super().changelist_view(request, {"title": "Chains and batches", **(extra_context or {})})

    @admin.action(description="Cancel the selected chains and batches", permissions=["change"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Workflow]) -> HttpResponse | None:
        """Like Django's delete_selected: a confirmation page first, the cancellations on its POST."""
        workflows = list(queryset)
        if request.POST.get("post") != "yes":
            return self._cancel_confirmation(request, workflows, bulk=True)
        cancelled = sum(self._cancel(request, workflow) for workflow in workflows)
        if cancelled:
            self.message_user(request, f"{cancelled} chain(s) and batch(es) cancelled.", messages.SUCCESS)
        if len(workflows) > cancelled:
            self.message_user(
                request, f"{len(workflows) - cancelled} had ended already: left as they were.", messages.WARNING
            )
        return None

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: the confirmation page; its POST (``post=yes``) cancels the workflow. Top-level ones only."""
        if not self.has_change_permission(request):
            raise PermissionDenied
        workflow = self.get_object(request, object_id)
        if workflow is None:
            self.message_user(request, f"There is no chain or batch with id {object_id}.", messages.WARNING)
            return HttpResponseRedirect(self._preserving(request, self._url("changelist")))
        back = self._preserving(request, self._url("change", workflow.pk))
        if workflow.parent_id is not None:
            self.message_user(
                request, f"{capfirst(str(workflow))} is nested: cancel its top workflow.", messages.WARNING
            )
            return HttpResponseRedirect(back)
        if workflow.state in engine.FINAL:
            self.message_user(request, f"{capfirst(str(workflow))} has ended ({workflow.state}).", messages.WARNING)
            return HttpResponseRedirect(back)
        if request.method == "POST" and request.POST.get("post") == "yes":
            if self._cancel(request, workflow):
                self.message_user(request, f"{capfirst(str(workflow))} cancelled.", messages.SUCCESS)
            else:  # it ended between the page and the click
                self.message_user(request, f"{capfirst(str(workflow))} had ended already.", messages.WARNING)
            return HttpResponseRedirect(back)
        return self._cancel_confirmation(request, [workflow], bulk=False)

    def _cancel_confirmation(self, request: HttpRequest, workflows: Sequence[Workflow], *, bulk: bool) -> HttpResponse:
        if bulk:
            back, form_url, crumbs = self._preserving(request, self._url("changelist")), "", []
        else:
            back = self._preserving(request, self._url("change", workflows[0].pk))
            form_url = self._preserving(request, self._url("cancel", workflows[0].pk))
            crumbs = [(back, str(workflows[0]))]
        counted = progress_of(workflow.pk for workflow in workflows)
        title = "Cancel chains and batches" if bulk else f"Cancel {workflows[0].kind}"
        context = {
            **self._page_context(request, title, crumbs, "Cancel"),
            "workflows": [(workflow, counted.get(workflow.pk, Progress())) for workflow in workflows],
            "running": sum(workflow.state not in engine.FINAL for workflow in workflows),
            "bulk": bulk,
            "back_url": back,
            "form_url": form_url,
        }
        return TemplateResponse(request, "admin/kinetis_queue/workflow/cancel_confirmation.html", context)

    # -- URLs and page plumbing (as FailedJobAdmin's) ----------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        cancel: URLPattern = path(
            "<str:object_id>/cancel/", self.admin_site.admin_view(self.cancel_view), name=self._url_name("cancel")
        )
        return [cancel, *super().get_urls()]


def _when(moment: datetime | None) -> str:
    """Local time to the second, as the failed-jobs list has it; "-" when not yet."""
    if moment is None:
        return "-"
    local = timezone.localtime(moment)
    return format_html("<span>{}</span> <span>{}</span>", local.strftime("%Y-%m-%d"), local.strftime("%H:%M:%S"))
