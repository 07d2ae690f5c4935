"""The Django admin for failed jobs: list, filters, search, a read-only detail page, retry and forget,
and a status page with the figures of ``queue_status``.

What is shown follows one rule: never a job argument's value unless it is not ``Sensitive``. The
raw arguments are stored (a retry needs them) but only their redacted form is displayed, and no
URL parameter reaches the stored text: search covers safe metadata only, and the changelist
accepts only the parameters its list filters send (any other lookup, ``?args__contains=...``,
would answer whether a guessed value is stored). Every view goes through
``admin_site.admin_view()`` (staff login, CSRF on POST, no caching), and each operation asks for
the model permission it uses: retry "change", forget "delete"; the status page asks for "view", and
its Pause and Resume buttons (kinetis_queue.control) "change", like Retry.
Retry and Forget ask for confirmation like Django's delete does (Forget) and write LogEntry rows.
Pause, Resume, Retry and Forget accept a ``next`` (a local path only) to return to the page that asked:
the dashboard (kinetis_queue/dashboard) posts to these same views rather than having copies of them.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import FieldListFilter
from django.contrib.admin.models import DELETION, LogEntry
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import mark_safe

from kinetis_queue import control, failed
from kinetis_queue.admin.pages import BREADCRUMBS_AS_LIST as BREADCRUMBS_AS_LIST  # re-exported: its home is pages
from kinetis_queue.admin.pages import AdminPages
from kinetis_queue.dashboard.views import dashboard_urls
from kinetis_queue.exceptions import KinetisQueueError
from kinetis_queue.models import FailedJob
from kinetis_queue.observability import status
from kinetis_queue.payload import redaction
from kinetis_queue.validation import validate_queue_name
from kinetis_queue.workflows import engine as workflow_engine

logger = logging.getLogger("kinetis_queue")


def _paused_what(queue: str, connection: str) -> str:
    """How the admin's messages and log name what a pause or resume is about."""
    if queue == control.ALL_QUEUES:
        return f"Every queue of connection {connection}"
    return f"Queue {queue} of connection {connection}"


@admin.register(FailedJob)
class FailedJobAdmin(AdminPages):
    # The failure time first, so no long class name can push it out of a narrow window.
    list_display = ("failed_at_shown", "job", "exception_name", "queue", "connection_shown", "attempts")
    list_display_links = ("job",)
    #: Field names only: lookup_allowed() derives the accepted URL parameters from these.
    list_filter = ("connection", "queue", "exception_class", "failed_at")
    # Never the arguments, metadata or exception text: a search over them would reveal a Sensitive
    # value one guess at a time.
    search_fields = ("job_class", "job_id", "queue", "exception_class")
    ordering = ("-failed_at", "-id")
    actions = ("retry_selected", "forget_selected")
    fields = (
        "job",
        "job_id",
        "connection_shown",
        "queue",
        "attempts",
        "max_attempts",
        "failed_at",
        "arguments",
        "metadata",
        "exception_class",
        "exception",
        "traceback_shown",
    )
    readonly_fields = fields

    _filter_parameters: frozenset[str] | None = None

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

    # -- what may filter the changelist: the list filters' own parameters, nothing else ------------

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        """Only a parameter one of the list filters sends. Django allows any lookup on a local field,
        and ``?args__contains=<guess>`` answers with a row count whether the guess is stored."""
        if self._filter_parameters is None:
            allowed: set[str] = set()
            for name in self.list_filter:
                assert isinstance(name, str), "list_filter holds field names only"
                field = self.opts.get_field(name)
                spec = FieldListFilter.create(field, request, {}, self.model, self, field_path=name)  # type: ignore[arg-type]
                allowed.update(parameter for parameter in spec.expected_parameters() or () if parameter)
            self._filter_parameters = frozenset(allowed)
        return lookup in self._filter_parameters

    # -- columns and detail fields -----------------------------------------------------------------

    @admin.display(description="job", ordering="job_class")
    def job(self, obj: FailedJob) -> str:
        """The task or receiver the record carried (not RunTask), breakable after each dot and underscore."""
        parts = re.split(r"(?<=[._])", failed.shown_class(obj))
        return format_html_join(mark_safe("<wbr>"), "{}", ((part,) for part in parts))

    @admin.display(description="failed at", ordering="failed_at")
    def failed_at_shown(self, obj: FailedJob) -> str:
        """Local time to the second, as log lines have it; the date and the time each stay on one line."""
        when = timezone.localtime(obj.failed_at)
        return format_html("<span>{}</span> <span>{}</span>", when.strftime("%Y-%m-%d"), when.strftime("%H:%M:%S"))

    @admin.display(description="connection", ordering="connection")
    def connection_shown(self, obj: FailedJob) -> str:
        return obj.connection or "(default)"

    @admin.display(description="exception", ordering="exception_class")
    def exception_name(self, obj: FailedJob) -> str:
        return obj.exception_class.rpartition(".")[2]

    @admin.display(description="arguments (Sensitive ones redacted)")
    def arguments(self, obj: FailedJob) -> str:
        return format_html("<pre>{}</pre>", redaction.shown_args(obj))

    @admin.display(description="exception message")
    def exception(self, obj: FailedJob) -> str:
        return format_html("<pre>{}</pre>", redaction.shown_exception(obj)[0])

    @admin.display(description="traceback")
    def traceback_shown(self, obj: FailedJob) -> str:
        return format_html("<pre>{}</pre>", redaction.shown_exception(obj)[1] or "(not recorded)")

    # -- the two operations, shared by the bulk actions and the detail page ------------------------

    def _retry(self, request: HttpRequest, record: FailedJob) -> failed.RetryOutcome:
        """failed.retry(), a history entry when it pushed, a message when it did not."""
        outcome = failed.retry(record.pk)
        if outcome.ok:
            self.log_change(request, record, f"Retried: pushed again as job {outcome.job_id}.")
        else:
            self.message_user(request, f"Failed job {record.pk} was not retried: {outcome.error}", messages.ERROR)
        return outcome

    def _forget(self, request: HttpRequest, record: FailedJob) -> bool:
        """failed.forget(), and a history entry when it removed the record."""
        if not failed.forget(record.pk):
            return False
        user_id = request.user.pk
        assert user_id is not None  # admin_view() let only a logged-in staff user in
        LogEntry.objects.log_actions(
            user_id=user_id, queryset=[record], action_flag=DELETION, change_message="Forgotten.", single_object=True
        )
        return True

    def delete_model(self, request: HttpRequest, obj: FailedJob) -> None:
        # Django's delete page (it logs the deletion itself): removal goes through failed.forget too.
        failed.forget(obj.pk)

    # -- bulk actions ------------------------------------------------------------------------------

    @admin.action(description="Retry the selected failed jobs", permissions=["change"])
    def retry_selected(self, request: HttpRequest, queryset: QuerySet[FailedJob]) -> None:
        pushed = sum(self._retry(request, record).ok for record in queryset)
        if pushed:
            self.message_user(request, f"{pushed} failed job(s) pushed again.", messages.SUCCESS)

    @admin.action(description="Forget the selected failed jobs", permissions=["delete"])
    def forget_selected(self, request: HttpRequest, queryset: QuerySet[FailedJob]) -> HttpResponse | None:
        """Like Django's delete_selected: a confirmation page first, the removal on its POST."""
        records = list(queryset)
        if request.POST.get("post") != "yes":
            return self._forget_confirmation(request, records, bulk=True)
        removed = sum(self._forget(request, record) for record in records)
        self.message_user(request, f"{removed} failed job(s) forgotten.", messages.SUCCESS)
        return None

    # -- the detail page's Retry and Forget --------------------------------------------------------

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        context = {
            **(extra_context or {}),
            "can_retry": self.has_change_permission(request),
            "can_forget": self.has_delete_permission(request),
            "show_delete": False,  # Forget (with its own confirmation) replaces Django's Delete link
        }
        return super().change_view(request, object_id, form_url, context)

    def retry_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        """POST: retry one record; back to the list when it was pushed, to the record when not."""
        if not self.has_change_permission(request):
            raise PermissionDenied
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        record = self.get_object(request, str(object_id))
        if record is None:
            return self._gone(request, object_id)
        if self._retry(request, record).ok:
            self.message_user(request, f"Failed job {record.pk} pushed again.", messages.SUCCESS)
            return self._back(request) or self._to_changelist(request)
        return HttpResponseRedirect(self._preserving(request, self._url("change", record.pk)))

    def forget_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        """GET: the confirmation page; its POST (``post=yes``) forgets the record."""
        if not self.has_delete_permission(request):
            raise PermissionDenied
        record = self.get_object(request, str(object_id))
        if record is None:
            return self._gone(request, object_id)
        if request.method == "POST" and request.POST.get("post") == "yes":
            if not self._forget(request, record):  # another operator forgot it since it was read
                return self._gone(request, object_id)
            self.message_user(request, f"Failed job {record.pk} forgotten.", messages.SUCCESS)
            return self._back(request) or self._to_changelist(request)
        return self._forget_confirmation(request, [record], bulk=False)

    def _forget_confirmation(self, request: HttpRequest, records: list[FailedJob], *, bulk: bool) -> HttpResponse:
        if bulk:
            back, form_url, crumbs = self._preserving(request, self._url("changelist")), "", []
        else:
            back = self._preserving(request, self._url("change", records[0].pk))
            form_url = self._preserving(request, self._url("forget", records[0].pk))
            crumbs = [(back, str(records[0]))]
            back = self.return_to(request) or back
        context = {
            **self._page_context(request, "Forget failed jobs" if bulk else "Forget failed job", crumbs, "Forget"),
            "records": [(record, failed.shown_class(record)) for record in records],
            "bulk": bulk,
            "back_url": back,
            "form_url": form_url,
            "next": self.return_to(request),
        }
        return TemplateResponse(request, "admin/kinetis_queue/failedjob/forget_confirmation.html", context)

    # -- the status page ---------------------------------------------------------------------------

    def status_view(self, request: HttpRequest) -> HttpResponse:
        """queue_status's figures per connection and queue, paused or not, for staff who may view failed
        jobs; those who may retry them ("change") get a Pause or Resume button per queue."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {
            **self._page_context(request, "Queue status", [], "Queue status"),
            "figures": status.collect(),
            "workflows": workflow_engine.counts(),
            "can_pause": self.has_change_permission(request),
            "pause_url": self._url("pause"),
            "resume_url": self._url("resume"),
        }
        return TemplateResponse(request, "admin/kinetis_queue/status.html", context)

    def pause_view(self, request: HttpRequest) -> HttpResponse:
        """POST from the status page: the confirmation page; its POST (``post=yes``) pauses the queue."""
        target = self._pause_target(request)
        if not isinstance(target, tuple):
            return target
        connection, queue = target
        what = _paused_what(queue, connection)
        if request.POST.get("post") != "yes":
            title = "Pause every queue" if queue == control.ALL_QUEUES else "Pause a queue"
            context = {
                **self._page_context(request, title, [(self._url("status"), "Queue status")], title),
                "connection": connection,
                "queue": queue,
                "form_url": self._url("pause"),
                "back_url": self.return_to(request) or self._url("status"),
                "next": self.return_to(request),
            }
            return TemplateResponse(request, "admin/kinetis_queue/pause_confirmation.html", context)
        if control.pause(queue, connection):
            logger.info("%s paused from the admin by %s", what, request.user)
            self.message_user(
                request,
                f"{what} paused: its workers take none of its jobs from about a second on; pushes still succeed.",
                messages.SUCCESS,
            )
        else:
            self.message_user(request, f"{what} was paused already.", messages.INFO)
        return self._back(request) or HttpResponseRedirect(self._url("status"))

    def resume_view(self, request: HttpRequest) -> HttpResponse:
        """POST from the status page: resume the queue (no confirmation: resuming loses nothing)."""
        target = self._pause_target(request)
        if not isinstance(target, tuple):
            return target
        connection, queue = target
        what = _paused_what(queue, connection)
        if control.resume(queue, connection):
            logger.info("%s resumed from the admin by %s", what, request.user)
            self.message_user(
                request, f"{what} resumed: its workers take its jobs again within about a second.", messages.SUCCESS
            )
        else:
            self.message_user(request, f"{what} was not paused.", messages.INFO)
        return self._back(request) or HttpResponseRedirect(self._url("status"))

    def _pause_target(self, request: HttpRequest) -> tuple[str, str] | HttpResponse:
        """The (connection, queue) a Pause or Resume POST names, checked before anything changes; else the
        response: PermissionDenied without "change", 405 for a GET, back to the status page when invalid."""
        if not self.has_change_permission(request):
            raise PermissionDenied
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        try:
            given = request.POST.get("queue", "")
            queue = control.ALL_QUEUES if given == control.ALL_QUEUES else validate_queue_name(given)
            connection = control.connection_name(request.POST.get("connection", ""), pausing=True)
        except KinetisQueueError as exc:
            self.message_user(request, f"Nothing was changed: {exc}", messages.ERROR)
            return self._back(request) or HttpResponseRedirect(self._url("status"))
        return connection, queue

    # -- URLs and page plumbing --------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        def route(pattern: str, view: Any, name: str) -> URLPattern:
            url: URLPattern = path(pattern, self.admin_site.admin_view(view), name=self._url_name(name))
            return url

        own = [
            route("status/", self.status_view, "status"),
            route("status/pause/", self.pause_view, "pause"),
            route("status/resume/", self.resume_view, "resume"),
            route("<int:object_id>/retry/", self.retry_view, "retry"),
            route("<int:object_id>/forget/", self.forget_view, "forget"),
        ]

        return [*own, *dashboard_urls(self), *super().get_urls()]

    def return_to(self, request: HttpRequest) -> str:
        """The ``next`` the request names (POST, else GET) when it is a path on this site, else "": an
        operation started from the dashboard returns there, and no parameter can send anyone elsewhere."""
        wanted = request.POST.get("next") or request.GET.get("next") or ""
        if not wanted.startswith("/") or wanted.startswith("//"):
            return ""
        allowed = url_has_allowed_host_and_scheme(wanted, {request.get_host()}, require_https=request.is_secure())
        return wanted if allowed else ""

    def _back(self, request: HttpRequest) -> HttpResponse | None:
        """A redirect to the request's ``next`` (see return_to()), or None when it names none."""
        wanted = self.return_to(request)
        return HttpResponseRedirect(wanted) if wanted else None

    def _to_changelist(self, request: HttpRequest) -> HttpResponse:
        return HttpResponseRedirect(self._preserving(request, self._url("changelist")))

    def _gone(self, request: HttpRequest, object_id: int) -> HttpResponse:
        self.message_user(request, f"There is no failed job with id {object_id}.", messages.WARNING)
        return self._to_changelist(request)


# The schedule list (read-only) lives with the schedules.
from kinetis_queue.schedules import admin as _schedule_admin  # noqa: E402, F401

# The chains and batches (list, detail, Cancel) live with the workflows.
from kinetis_queue.workflows import admin as _workflow_admin  # noqa: E402, F401
