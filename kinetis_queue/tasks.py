"""The django.tasks backend under the path Django's ``TASKS`` setting names (the code lives in
``kinetis_queue.contrib.tasks``)::

    TASKS = {"default": {"BACKEND": "kinetis_queue.tasks.KinetisTaskBackend",
                         "QUEUES": ["default"], "OPTIONS": {"CONNECTION": "default"}}}

Importing it needs the django.tasks API (Django 6, or the ``django-tasks`` backport on 5.2).
"""

from __future__ import annotations

from kinetis_queue.contrib.tasks.backend import KinetisTaskBackend

__all__ = ["KinetisTaskBackend"]
