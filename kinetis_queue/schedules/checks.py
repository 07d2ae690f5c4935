"""System check for schedules (``manage.py check``).

- kinetis_queue.E006: a schedule (KINETIS_QUEUE["SCHEDULE"] entry or ``@schedule``) cannot be used:
  a bad or unparseable CRON (or cronsim missing), a bad EVERY, a JOB no worker could run, ARGS that
  do not build the job or do not pass the argument contract, an unknown CONNECTION, an invalid
  QUEUE, TIMEZONE or CATCH_UP. The message names the schedule and the key; never an argument's value.
"""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, register

from kinetis_queue.payload import registry
from kinetis_queue.schedules import declaration


@register()
def check_schedules(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E006: every declared schedule validates."""
    registry.discover()  # the job classes a schedule names are registered by discovery
    _good, errors = declaration.collect()
    return [Error(str(error), id="kinetis_queue.E006") for error in errors]
