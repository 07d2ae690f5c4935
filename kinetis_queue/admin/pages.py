"""What the app's admin pages share (the failed jobs', the schedules', the workflows'): a leaf module, so a
feature's admin imports it without the admin hub (kinetis_queue.admin), which imports the features' admins."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import django
from django.contrib import admin
from django.contrib.admin.templatetags.admin_urls import add_preserved_filters
from django.http import HttpRequest
from django.urls import reverse
from django.utils.text import capfirst

if TYPE_CHECKING:
    _AnyModelAdmin = admin.ModelAdmin[Any]
else:  # ModelAdmin is generic for the type checker only
    _AnyModelAdmin = admin.ModelAdmin

#: Django 6.1 marks breadcrumbs up as ``<ol class="breadcrumbs">`` with ``<li>`` items; 5.2 and 6.0 as a
#: ``<div class="breadcrumbs">`` separated by ``&rsaquo;``. Each version's CSS styles only its own.
BREADCRUMBS_AS_LIST = django.VERSION >= (6, 1)


class AdminPages(_AnyModelAdmin):
    """What the app's admin pages share: their URL names, the changelist's filters carried along, and the page
    context with breadcrumbs (Home, the app, the model's list, then the page's own)."""

    def _url_name(self, name: str) -> str:
        return f"{self.opts.app_label}_{self.opts.model_name}_{name}"

    def _url(self, name: str, *args: Any) -> str:
        return reverse(f"admin:{self._url_name(name)}", args=args)

    def _preserving(self, request: HttpRequest, url: str) -> str:
        """``url`` carrying the changelist's filters along, as Django's own admin pages do."""
        return add_preserved_filters({"preserved_filters": self.get_preserved_filters(request), "opts": self.opts}, url)

    def _page_context(
        self, request: HttpRequest, title: str, crumbs: Iterable[tuple[str, str]], current: str
    ) -> dict[str, Any]:
        """The admin's page context, and breadcrumbs in the installed Django's markup (Home, the app, the
        model's list, then ``crumbs``, then ``current``)."""
        return {
            **self.admin_site.each_context(request),
            "title": title,
            "opts": self.opts,
            "breadcrumbs_as_list": BREADCRUMBS_AS_LIST,
            "crumbs": [
                (reverse("admin:index"), "Home"),
                (
                    reverse("admin:app_list", kwargs={"app_label": self.opts.app_label}),
                    self.opts.app_config.verbose_name,
                ),
                (self._preserving(request, self._url("changelist")), capfirst(self.opts.verbose_name_plural)),
                *crumbs,
            ],
            "current": current,
        }
