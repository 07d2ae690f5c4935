"""Django app config: imports the system checks and runs discovery (registry.py)."""

from __future__ import annotations

import importlib
import importlib.util

from django.apps import AppConfig


class KinetisQueueConfig(AppConfig):
    name = "kinetis_queue"
    verbose_name = "Kinetis queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from kinetis_queue import checks, registry  # noqa: F401  (checks registers the system checks)
        from kinetis_queue.contrib import receivers  # noqa: F401  (registers QueuedReceiverJob)

        # The carrier jobs of contrib/ (QueuedReceiverJob, RunTask where django.tasks exists) are
        # registered before any message arrives: a worker resolves only registered names, and
        # discovery skips this app's own modules.
        if any(importlib.util.find_spec(name) is not None for name in ("django.tasks", "django_tasks")):
            importlib.import_module("kinetis_queue.contrib.tasks.backend")
        # Job classes, receivers and tasks are resolved only among what the process knows (DESIGN.md §2).
        # A module that fails to import is kept and reported (check E004, queue_work), not raised here.
        registry.discover()
