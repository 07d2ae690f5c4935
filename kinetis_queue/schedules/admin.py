"""The admin's schedule list: read-only, the same lines as ``queue_schedule --list``.

Registered on the claim model (ScheduleTick), whose rows are per tick; the changelist shows one
line per declared schedule instead (name, rule, job, connection, queue, next run, last run, last
job id). Nothing can be added, changed or deleted here; the page asks for the "view" permission.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import reverse

from kinetis_queue.admin.pages import BREADCRUMBS_AS_LIST
from kinetis_queue.schedules import declaration
from kinetis_queue.schedules.models import ScheduleTick
from kinetis_queue.schedules.scheduler import Scheduler

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[ScheduleTick]
else:
    _ModelAdmin = admin.ModelAdmin


@admin.register(ScheduleTick)
class ScheduleAdmin(_ModelAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:

        if not self.has_view_permission(request):
            raise PermissionDenied
        schedules, problems = declaration.collect()
        lines = Scheduler(schedules).status()
        context = {
            **self.admin_site.each_context(request),
            "title": "Schedules",
            "opts": self.opts,
            "schedules": lines,
            "problems": [str(problem) for problem in problems],
            "breadcrumbs_as_list": BREADCRUMBS_AS_LIST,
            "crumbs": [
                (reverse("admin:index"), "Home"),
                (reverse("admin:app_list", kwargs={"app_label": self.opts.app_label}), "Kinetis queue"),
            ],
            "current": "Schedules",
        }
        return TemplateResponse(request, "admin/kinetis_queue/schedules.html", context)
