"""``QueuedEmailBackend``: Django's email backend that queues each message as one job.

``EMAIL_BACKEND = "kinetis_queue.contrib.mail.QueuedEmailBackend"`` (or a MAILERS entry on Django
6.1+) turns every ``send_mail``, ``send_mass_mail``, ``mail_admins``, ``EmailMessage.send()`` and
``EmailMultiAlternatives.send()`` into one ``SendMailJob`` per message, pushed to
KINETIS_QUEUE["MAIL"]'s CONNECTION and QUEUE with its MAX_ATTEMPTS; ``send_messages`` returns the
number of messages queued. What the payload carries and refuses is message.py's; what sends it on
the worker is jobs.py's.

- Every message of a call is converted and checked before the first push, so a message that cannot
  be queued (an attachment of a type it cannot carry, above MAX_BYTES) raises UnqueueableMailError
  and queues none of them. A message without recipients is skipped and not counted, as Django's
  own backends do.
- Inside ``atomic()`` on the ON_COMMIT database (default "default") each push waits for the commit
  (``push_after_commit``): a rolled-back transaction sends no mail, and a worker never sends before
  the rows the message is about are visible. A push that then fails is logged and signalled
  (``push_on_commit_failed``), as any on-commit push; it was still counted. ON_COMMIT None pushes at once.
- ``fail_silently`` silences only a push that fails (the store unreachable): the count returned
  then stops at the messages queued so far. A setting or a message that is wrong raises anyway,
  and on the worker the real backend never fails silently (a failed send is retried).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, ClassVar

from django.core.mail import EmailMessage
from django.core.mail.backends.base import BaseEmailBackend
from django.db import transaction

from kinetis_queue import conf
from kinetis_queue.connections import queues
from kinetis_queue.contracts import PreparedPush, Queue
from kinetis_queue.contrib.mail.jobs import SendMailJob
from kinetis_queue.contrib.mail.message import to_payload
from kinetis_queue.dispatch import push_after_commit

logger = logging.getLogger("kinetis_queue.mail")


class QueuedEmailBackend(BaseEmailBackend):
    """Queues each message as a SendMailJob instead of sending it (KINETIS_QUEUE["MAIL"])."""

    #: What SendMailJob refuses as the backend that really sends (jobs.py sits below this module).
    queues_messages: ClassVar[bool] = True

    def __init__(self, fail_silently: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.fail_silently = fail_silently

    def send_messages(self, email_messages: Sequence[EmailMessage]) -> int:
        """Queue one job per message that has recipients; return how many were queued."""
        if not email_messages:
            return 0
        settings = conf.mail()

        target = queues.default() if settings.connection is None else queues[settings.connection]
        prepared = [self._prepare(target, message, settings) for message in email_messages if message.recipients()]
        queued = 0
        for push in prepared:
            try:
                self._push(target, push, settings)
            except Exception as exc:
                if not self.fail_silently:
                    raise
                logger.warning(
                    "A message could not be queued (job %s, queue %r, connection %r): %s; fail_silently is on, "
                    "so %d of %d messages were queued",
                    push.id,
                    push.queue,
                    target.connection,
                    type(exc).__name__,
                    queued,
                    len(prepared),
                )
                break
            queued += 1
        return queued

    @staticmethod
    def _prepare(target: Queue, message: EmailMessage, settings: conf.MailSettings) -> PreparedPush:
        message.message()  # Django's own header checks (locmem's too): a bad header raises here, not on the worker
        job = SendMailJob(to_payload(message, settings.max_bytes))
        return target.prepare(job, 0, settings.queue, settings.max_attempts)

    @staticmethod
    def _push(target: Queue, push: PreparedPush, settings: conf.MailSettings) -> None:
        database = settings.on_commit
        if database is not None and transaction.get_connection(database).in_atomic_block:
            push_after_commit(target, push, using=database)
        else:
            target.send(push)
        logger.debug("Queued a message as job %s on queue %r (connection %r)", push.id, push.queue, target.connection)
