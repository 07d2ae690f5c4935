"""URLs to mount in a project's urls.py: ``path("queue/", include("kinetis_queue.urls"))``.

``health/``: the health view; ``metrics/``: the Prometheus exposition (kinetis_queue/observability/views.py).
"""

from __future__ import annotations

from django.urls import path

from kinetis_queue.observability import views

app_name = "kinetis_queue"
urlpatterns = [path("health/", views.health, name="health"), path("metrics/", views.metrics, name="metrics")]
