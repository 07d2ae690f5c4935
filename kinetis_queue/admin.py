"""The Django admin for failed jobs: list, filters, search, a read-only detail page, retry and forget,
and a status page with the figures of ``queue_status``.

What is shown follows one rule: never a job argument's value unless it is not ``Sensitive``. The
raw arguments are stored (a retry needs them) but only their redacted form is displayed, and the
raw column is neither shown nor searchable. Every view goes through ``admin_site.admin_view()``
(staff login, CSRF on POST, no caching), and each action asks for the model permission it uses:
retry "change", forget "delete"; the status page asks for "view".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils.html import format_html

from kinetis_queue import failed, status
from kinetis_queue.models import FailedJob

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[FailedJob]
else:  # ModelAdmin is generic for the type checker only
    _ModelAdmin = admin.ModelAdmin


@admin.register(FailedJob)
class FailedJobAdmin(_ModelAdmin):
    list_display = ("job_class", "connection_shown", "queue", "exception_name", "attempts", "failed_at")
    list_filter = ("connection", "queue", "exception_class", "failed_at")
    # Never the arguments: a search over them would reveal a Sensitive value one guess at a time.
    search_fields = ("job_class", "job_id", "queue", "exception_class")
    ordering = ("-failed_at", "-id")
    actions = ("retry_selected", "forget_selected")
    fields = (
        "job_class", "job_id", "connection_shown", "queue", "attempts", "max_attempts", "failed_at",
        "arguments", "metadata", "exception_class", "exception", "traceback_shown",
    )
    readonly_fields = fields

    # -- permissions: a record is never edited or added by hand ------------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: FailedJob | None = None) -> bool:
        # "change" is the retry permission; a record itself is read-only, so its page is a view.
        return obj is None and super().has_change_permission(request)

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        # action_location exists from Django 6.1 on; 5.2 never passes it.
        if action_location is None:
            actions = super().get_actions(request)
        else:
            actions = super().get_actions(request, action_location)  # type: ignore[call-arg,unused-ignore]
        actions.pop("delete_selected", None)  # "forget" is this model's deletion
        return actions

    # -- columns and detail fields -----------------------------------------------------------------

    @admin.display(description="connection", ordering="connection")
    def connection_shown(self, obj: FailedJob) -> str:
        return obj.connection or "(default)"

    @admin.display(description="exception", ordering="exception_class")
    def exception_name(self, obj: FailedJob) -> str:
        return obj.exception_class.rpartition(".")[2]

    @admin.display(description="arguments (Sensitive ones redacted)")
    def arguments(self, obj: FailedJob) -> str:
        return format_html("<pre>{}</pre>", failed.shown_args(obj))

    @admin.display(description="exception message")
    def exception(self, obj: FailedJob) -> str:
        return format_html("<pre>{}</pre>", failed.shown_exception(obj)[0])

    @admin.display(description="traceback")
    def traceback_shown(self, obj: FailedJob) -> str:
        return format_html("<pre>{}</pre>", failed.shown_exception(obj)[1] or "(not recorded)")

    # -- actions -----------------------------------------------------------------------------------

    @admin.action(description="Retry the selected failed jobs", permissions=["change"])
    def retry_selected(self, request: HttpRequest, queryset: QuerySet[FailedJob]) -> None:
        pushed = 0
        for pk in queryset.values_list("pk", flat=True):
            outcome = failed.retry(pk)
            if outcome.ok:
                pushed += 1
            else:
                self.message_user(request, f"Failed job {pk} was not retried: {outcome.error}", messages.ERROR)
        if pushed:
            self.message_user(request, f"{pushed} failed job(s) pushed again.", messages.SUCCESS)

    @admin.action(description="Forget the selected failed jobs", permissions=["delete"])
    def forget_selected(self, request: HttpRequest, queryset: QuerySet[FailedJob]) -> None:
        removed, _ = queryset.delete()
        self.message_user(request, f"{removed} failed job(s) forgotten.", messages.SUCCESS)

    # -- the status page ---------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        status_url = path(
            "status/",
            self.admin_site.admin_view(self.status_view),
            name=f"{self.opts.app_label}_{self.opts.model_name}_status",
        )
        return [status_url, *super().get_urls()]

    def status_view(self, request: HttpRequest) -> HttpResponse:
        """queue_status's figures per connection and queue, for staff who may view failed jobs."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            "title": "Queue status",
            "opts": self.opts,
            "figures": status.collect(),
        }
        return TemplateResponse(request, "admin/kinetis_queue/status.html", context)
