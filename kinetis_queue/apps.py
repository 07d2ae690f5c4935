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
        from kinetis_queue import checks, receivers, registry  # noqa: F401  (checks registers the system checks)

        # The package's own carrier jobs (QueuedReceiverJob above, RunTask where django.tasks exists)
        # are registered before any message arrives: a worker resolves only registered names.
        if any(importlib.util.find_spec(name) is not None for name in ("django.tasks", "django_tasks")):
            importlib.import_module("kinetis_queue.tasks")
        # Job classes, receivers and tasks are resolved only among what the process knows (DESIGN.md §2).
        # A module that fails to import is kept and reported (check E004, queue_work), not raised here.
        registry.discover()
