"""URLs for the test suite: the Django admin (tests/operator/test_admin.py)."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [path("admin/", admin.site.urls), path("queue/", include("kinetis_queue.urls"))]
