"""System checks: a bad KINETIS_QUEUE setting surfaces in ``manage.py check`` as kinetis_queue.E001."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, register

from kinetis_queue import conf
from kinetis_queue.exceptions import QueueConfigurationError


@register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E001: the KINETIS_QUEUE setting does not validate."""
    try:
        conf.load()
    except QueueConfigurationError as exc:
        return [Error(str(exc), id="kinetis_queue.E001")]
    return []
