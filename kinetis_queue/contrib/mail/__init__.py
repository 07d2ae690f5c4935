"""Queued email: ``EMAIL_BACKEND = "kinetis_queue.contrib.mail.QueuedEmailBackend"`` (docs/mail.md).

backend.py queues each message, message.py turns it into JSON and back, jobs.py sends it on the
worker through the backend KINETIS_QUEUE["MAIL"] names, checks.py validates that setting (E009).
"""

from __future__ import annotations

from kinetis_queue.contrib.mail.backend import QueuedEmailBackend
from kinetis_queue.contrib.mail.jobs import MailNotSentError, SendMailJob
from kinetis_queue.contrib.mail.message import UnqueueableMailError

__all__ = ["MailNotSentError", "QueuedEmailBackend", "SendMailJob", "UnqueueableMailError"]
