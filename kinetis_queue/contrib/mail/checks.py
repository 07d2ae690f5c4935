"""System check for queued email (``manage.py check``).

- kinetis_queue.E009: KINETIS_QUEUE["MAIL"] does not validate (the message names the key), or its
  BACKEND cannot be imported, is not an email backend, or is QueuedEmailBackend itself (every
  message would be queued again, forever), or its MAILER alias is configured with QueuedEmailBackend.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register
from django.core.mail.backends.base import BaseEmailBackend
from django.utils.module_loading import import_string

from kinetis_queue import conf
from kinetis_queue.contrib.mail.backend import QueuedEmailBackend
from kinetis_queue.exceptions import QueueConfigurationError
from kinetis_queue.schema import key


@register()
def check_mail(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E009: KINETIS_QUEUE["MAIL"] validates and names a backend that sends."""

    try:
        mail = conf.mail()
    except QueueConfigurationError as exc:
        return [Error(str(exc), id="kinetis_queue.E009")]
    if mail.mailer is not None:
        mailers: dict[str, Any] = settings.MAILERS  # type: ignore[misc,unused-ignore]  # Django 6.1's setting
        path = str(mailers[mail.mailer].get("BACKEND", conf.DEFAULT_MAIL_BACKEND))
        where = key("MAIL", "MAILER")
    else:
        assert mail.backend is not None
        path, where = mail.backend, key("MAIL", "BACKEND")
    try:
        cls = import_string(path)
    except ImportError as exc:
        return [Error(f"{where} names {path!r}, which cannot be imported: {exc}", id="kinetis_queue.E009")]
    if isinstance(cls, type) and issubclass(cls, QueuedEmailBackend):
        return [
            Error(
                f"{where} names QueuedEmailBackend: every message would be queued again, forever",
                hint="Name the backend that sends (SMTP, an API's backend); EMAIL_BACKEND is the queued one.",
                id="kinetis_queue.E009",
            )
        ]
    if not (isinstance(cls, type) and issubclass(cls, BaseEmailBackend)):
        return [Error(f"{where} names {path!r}, which is not an email backend class", id="kinetis_queue.E009")]
    return []
