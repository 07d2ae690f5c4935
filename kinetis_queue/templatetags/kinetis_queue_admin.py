"""``{% kinetis_queue_connections as names %}``: the configured connections' names, for the app's admin index
page to link each connection's dashboard (admin/kinetis_queue/app_index.html)."""

from __future__ import annotations

from django import template

from kinetis_queue import conf
from kinetis_queue.exceptions import KinetisQueueError

register = template.Library()


@register.simple_tag
def kinetis_queue_connections() -> list[str]:
    """The names, in the settings' order; none when the settings are invalid (the checks report that)."""
    try:
        return list(conf.load().connections)
    except KinetisQueueError:
        return []
