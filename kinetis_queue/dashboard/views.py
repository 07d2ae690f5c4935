"""The dashboard's pages: one per connection, its live part alone (what the refresh script fetches), the
Restart confirmation and a Retry confirmation.

They are FailedJobAdmin's views in all but module (kinetis_queue/admin/__init__.py adds ``dashboard_urls()`` to its
own): the same admin_view() wrapper (staff login, CSRF, no caching), the same permissions ("view" to see
the page; "change" for every button; "delete" for Forget) and the same page context. Pause, Resume,
Retry and Forget are FailedJobAdmin's own views, posted to with a ``next`` back to the dashboard; Restart,
which had only a command (``queue_restart``), moves the connection's restart marker here, behind a
confirmation, as the command does.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse

from kinetis_queue import conf, connections, failed
from kinetis_queue.contracts import DisposableQueue, Queue
from kinetis_queue.dashboard import charts, figures
from kinetis_queue.exceptions import KinetisQueueError
from kinetis_queue.models import FailedJob
from kinetis_queue.validation import validate_connection_name
from kinetis_queue.worker.restart import has_own_marker, marker_for

if TYPE_CHECKING:
    from kinetis_queue.admin import FailedJobAdmin

logger = logging.getLogger("kinetis_queue")

#: Seconds between two refreshes of the live part by the page's script.
REFRESH_SECONDS = 5
TEMPLATES = "admin/kinetis_queue/dashboard/"


def dashboard_urls(model_admin: FailedJobAdmin) -> list[URLPattern]:
    """The dashboard's URLs, under the failed-jobs admin's (``admin:kinetis_queue_failedjob_dashboard``...)."""
    views = DashboardViews(model_admin)
    wrap = model_admin.admin_site.admin_view
    name = model_admin._url_name
    return [
        path("dashboard/<str:connection>/", wrap(views.page), name=name("dashboard")),
        path("dashboard/<str:connection>/restart/", wrap(views.restart), name=name("dashboard_restart")),
        path(
            "dashboard/<str:connection>/retry/<int:object_id>/",
            wrap(views.retry_confirmation),
            name=name("dashboard_retry"),
        ),
    ]


def dashboard_url(connection: str) -> str:
    return reverse("admin:kinetis_queue_failedjob_dashboard", args=[connection])


def request_restart(settings: conf.ConnectionSettings) -> int:
    """Move the connection's restart generation (what ``queue_restart --connection`` does); the new value."""
    cls = connections.backend_class(settings)
    queue: Queue | None = cls.from_settings(settings) if has_own_marker(cls) else None
    try:
        return marker_for(queue, settings.name).bump()
    finally:
        if isinstance(queue, DisposableQueue):
            queue.dispose()


class DashboardViews:
    """The views, bound to the FailedJobAdmin whose permissions and page context they use."""

    def __init__(self, model_admin: FailedJobAdmin) -> None:
        self.admin = model_admin

    def page(self, request: HttpRequest, connection: str) -> HttpResponse:
        """GET: the whole page; with ``?live=1`` its live part alone (the refresh script's request)."""
        if not self.admin.has_view_permission(request):
            raise PermissionDenied
        settings = self._settings(connection)
        data = figures.gather(settings.name)
        url = dashboard_url(settings.name)
        context = {
            **self._context(request, settings.name, f"Dashboard of connection {settings.name}"),
            "dashboard": data,
            "backend": settings.backend,
            "throughput_chart": charts.bar_chart(data.deliveries, label="deliveries", css_class="deliveries"),
            "failures_chart": charts.bar_chart(data.failures, label="failed", css_class="failures"),
            "can_change": self.admin.has_change_permission(request),
            "can_forget": self.admin.has_delete_permission(request),
            "inline": settings.backend == "sync",
            "dashboard_url": url,
            "live_url": f"{url}?live=1",
            "refresh_seconds": REFRESH_SECONDS,
            "read_at_unix": f"{data.read_at.timestamp():.3f}",
            "pause_url": self.admin._url("pause"),
            "resume_url": self.admin._url("resume"),
            "restart_url": reverse("admin:kinetis_queue_failedjob_dashboard_restart", args=[settings.name]),
            "failed_url": self.admin._url("changelist") + f"?connection={settings.name}",
            "window": figures.WINDOW,
        }
        template = "live.html" if request.GET.get("live") else "page.html"
        return TemplateResponse(request, TEMPLATES + template, context)

    def restart(self, request: HttpRequest, connection: str) -> HttpResponse:
        """POST from the dashboard: the confirmation page; its POST (``post=yes``) moves the restart marker."""
        if not self.admin.has_change_permission(request):
            raise PermissionDenied
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        settings = self._settings(connection)
        back = dashboard_url(settings.name)
        if request.POST.get("post") != "yes":
            context = {
                **self._context(request, settings.name, "Restart the workers"),
                "connection": settings.name,
                "form_url": request.path,
                "back_url": back,
            }
            return TemplateResponse(request, TEMPLATES + "restart_confirmation.html", context)
        try:
            generation = request_restart(settings)
        except KinetisQueueError as exc:
            self.admin.message_user(request, f"Restart not requested: {exc}", messages.ERROR)
            return HttpResponseRedirect(back)
        logger.info("Restart of connection %s requested from the admin by %s", settings.name, request.user)
        self.admin.message_user(
            request,
            f"Restart requested for connection {settings.name} (generation {generation}): its workers exit "
            "after their current job.",
            messages.SUCCESS,
        )
        return HttpResponseRedirect(back)

    def retry_confirmation(self, request: HttpRequest, connection: str, object_id: int) -> HttpResponse:
        """GET: "retry this failed job?"; the form posts to FailedJobAdmin's retry view, back here after."""
        if not self.admin.has_change_permission(request):
            raise PermissionDenied
        settings = self._settings(connection)
        back = dashboard_url(settings.name)
        record = FailedJob.objects.filter(pk=object_id).first()
        if record is None:
            self.admin.message_user(request, f"There is no failed job with id {object_id}.", messages.WARNING)
            return HttpResponseRedirect(back)
        context = {
            **self._context(request, settings.name, "Retry a failed job"),
            "record": record,
            "shown": failed.shown_class(record),
            "form_url": self.admin._url("retry", record.pk),
            "back_url": back,
        }
        return TemplateResponse(request, TEMPLATES + "retry_confirmation.html", context)

    # -- plumbing ----------------------------------------------------------------------------------

    @staticmethod
    def _settings(connection: str) -> conf.ConnectionSettings:
        """The configured connection the URL names; 404 for any other name."""
        try:
            validate_connection_name(connection)
            return conf.connection_settings(connection)
        except KinetisQueueError:
            raise Http404("No such connection") from None

    def _context(self, request: HttpRequest, connection: str, title: str) -> dict[str, Any]:
        crumbs = [(self.admin._url("status"), "Queue status")]
        if title.startswith("Dashboard"):
            return self.admin._page_context(request, title, crumbs, f"Dashboard: {connection}")
        crumbs.append((dashboard_url(connection), f"Dashboard: {connection}"))
        return self.admin._page_context(request, title, crumbs, title)
