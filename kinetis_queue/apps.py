"""Django app config: registers the system checks and the carrier jobs of contrib/, configures observability,
runs discovery."""

from __future__ import annotations

import importlib
import importlib.util

from django.apps import AppConfig


class KinetisQueueConfig(AppConfig):
    name = "kinetis_queue"
    verbose_name = "Kinetis queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from kinetis_queue.conf import checks  # noqa: F401  (registers the system checks)
        from kinetis_queue.payload import model_args, registry

        model_args.install()  # job arguments annotated with a model class (docs/job-arguments.md)
        from kinetis_queue.contrib import receivers  # noqa: F401  (registers QueuedReceiverJob)
        from kinetis_queue.contrib.mail import checks as _mail_checks  # noqa: F401  (SendMailJob, check E009)

        # The middleware chain (paused queues and cancelled jobs, chains and batches, unique jobs, observability, the
        # outbox) is read from KINETIS_QUEUE["MIDDLEWARE"] at its first use (kinetis_queue.middleware; check
        # kinetis_queue.E011), and again after the setting changes: nothing of it is set here.
        importlib.import_module("kinetis_queue.workflows.jobs")  # the callback carrier, known before any delivery

        # The carrier jobs of contrib/ (QueuedReceiverJob, SendMailJob, RunTask where django.tasks exists) are
        # registered before any message arrives: a worker resolves only registered names, and
        # discovery skips this app's own modules.
        if any(importlib.util.find_spec(name) is not None for name in ("django.tasks", "django_tasks")):
            importlib.import_module("kinetis_queue.contrib.tasks.backend")
        # Job classes, receivers and tasks are resolved only among what the process knows (DESIGN.md §2).
        # A module that fails to import is kept and reported (check E004, queue_work), not raised here.
        registry.discover()
