"""The job one queued message becomes, and the real email backend it sends through on the worker.

``SendMailJob`` carries the message payload (message.py) as one ``Sensitive`` argument, so logs,
signals, the failed-jobs admin and ``queue_failed`` show it as ``[redacted]``. On the worker it
rebuilds the message and sends it through KINETIS_QUEUE["MAIL"]'s BACKEND or MAILER as the worker's
own settings configure it: a credential is never read from the payload, because none is in it.

A send that raises fails the attempt, so the worker retries it under the job's cap (MAX_ATTEMPTS)
and records it once the cap is reached. The error raised then says which backend failed and how
(exception type, SMTP reply code, OS error) but not the exception's own text, which may name a
recipient (``SMTPRecipientsRefused``) or quote the message.
"""

from __future__ import annotations

import smtplib
from typing import Annotated, Any

from django.core.mail.backends.base import BaseEmailBackend
from django.utils.module_loading import import_string

from kinetis_queue import conf
from kinetis_queue.contrib.mail.message import from_payload
from kinetis_queue.exceptions import KinetisQueueError, QueueConfigurationError
from kinetis_queue.job import Job, Sensitive


class MailNotSentError(KinetisQueueError):
    """The real email backend did not send a queued message (the attempt fails and is retried)."""


class SendMailJob(Job):
    """One queued email message; ``handle()`` sends it through the worker's real email backend."""

    def __init__(self, message: Annotated[dict[str, Any], Sensitive]) -> None:
        self.message = message

    def handle(self) -> None:
        email = from_payload(self.message)
        settings = conf.mail()
        backend = real_backend(settings)
        try:
            sent = backend.send_messages([email])
        except Exception as exc:
            # from None: the original exception, whose text may name recipients, is not chained into
            # the traceback the failed-job record keeps.
            raise MailNotSentError(f"sending through {described_backend(settings)} failed: {described(exc)}") from None
        if sent != 1:
            raise MailNotSentError(
                f"{described_backend(settings)} reported {sent!r} messages sent instead of 1 (is it failing silently?)"
            )


def described_backend(settings: conf.MailSettings) -> str:
    """The real backend as an operator knows it: its dotted path or its MAILERS alias."""
    return f"the MAILERS alias {settings.mailer!r}" if settings.mailer is not None else str(settings.backend)


def real_backend(settings: conf.MailSettings) -> BaseEmailBackend:
    """A new instance of the backend KINETIS_QUEUE["MAIL"] names, built from this process's settings.

    Never with ``fail_silently``: a send that fails must fail the job, else it is acked unsent.
    """
    backend: Any
    if settings.mailer is not None:
        from django.core.mail import mailers  # Django 6.1+

        backend = mailers[settings.mailer]
    else:
        assert settings.backend is not None  # conf.mail() fills in Django's default
        backend = import_string(settings.backend)()
    queues = getattr(backend, "queues_messages", False) is True  # QueuedEmailBackend or a subclass
    if queues or not isinstance(backend, BaseEmailBackend):
        what = "is QueuedEmailBackend itself" if queues else "is not an email backend"
        raise QueueConfigurationError(
            f"KINETIS_QUEUE['MAIL'] names {described_backend(settings)}, which {what}: name the backend that sends"
        )
    return backend


def described(exc: Exception) -> str:
    """What may be said of a send failure: its type, an SMTP reply code, an OS error, never its text."""
    module = type(exc).__module__
    name = type(exc).__qualname__ if module == "builtins" else f"{module}.{type(exc).__qualname__}"
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        codes = sorted({str(reply[0]) for reply in exc.recipients.values() if isinstance(reply, tuple) and reply})
        return f"{name}: {len(exc.recipients)} recipient(s) refused (reply codes {', '.join(codes) or 'unknown'})"
    if isinstance(exc, smtplib.SMTPResponseException):
        return f"{name}: SMTP reply code {exc.smtp_code}"
    if isinstance(exc, OSError) and exc.strerror is not None:
        return f"{name}: [Errno {exc.errno}] {exc.strerror}"
    return f"{name} (its message is not kept: it may name a recipient or quote the message)"
