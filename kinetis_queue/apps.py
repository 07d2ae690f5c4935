"""Django app config: imports the system checks and autodiscovers ``<app>.jobs`` modules."""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules


class KinetisQueueConfig(AppConfig):
    name = "kinetis_queue"
    verbose_name = "Kinetis queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from kinetis_queue import checks  # noqa: F401  (registers the system checks)

        # Job classes are resolved only among classes the process knows (DESIGN.md §2).
        autodiscover_modules("jobs")
