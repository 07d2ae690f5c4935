"""Queued email through a real SMTP server (aiosmtpd on a free loopback port), on the SQLite store:
the message received equals the one sent; with SMTP down the job is retried, then recorded, and no
log line, shown argument or recorded error names a recipient or quotes the message (docs/mail.md)."""

from __future__ import annotations

import email
import email.policy
import json
import logging
from io import StringIO

import pytest
from django.core.mail import EmailMessage
from django.core.management import call_command

from kinetis_queue import queues
from kinetis_queue.models import FailedJob
from kinetis_queue.payload.redaction import shown_args, shown_exception
from kinetis_queue.worker import Worker
from tests.integrations.mail.conftest import SMTP, SmtpServer, needs_mailers, queued_mail
from tests.integrations.mail.messages import BODY, PNG, RECIPIENT, SUBJECT, full_message

pytestmark = needs_mailers


def _work(queue_name: str, jobs: int = 1) -> None:
    worker = Worker(queues["sqlite"], retry_base_delay=0)
    try:
        for _ in range(jobs):
            assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()


def _smtp(port: int) -> dict[str, object]:
    """The worker's own SMTP mailer: the only place its host and port (and any credential) live."""
    return {"smtp": {"BACKEND": SMTP, "OPTIONS": {"host": "127.0.0.1", "port": port, "timeout": 5}}}


def _parts(message: email.message.EmailMessage) -> list[tuple[str, str | None, bytes]]:
    """Every leaf part: its content type, filename and decoded bytes."""
    return [
        (part.get_content_type(), part.get_filename(), part.get_payload(decode=True))
        for part in message.walk()
        if not part.is_multipart()
    ]


def test_the_message_the_smtp_server_receives_equals_the_one_sent(smtp_server: SmtpServer, queue_name: str) -> None:
    """Headers, bodies and attachments compared after parsing; the envelope carries bcc, not a header."""
    with queued_mail("sqlite", queue_name, mailers=_smtp(smtp_server.port), MAILER="smtp"):
        message = full_message()
        assert message.send() == 1
        [job] = [queues["sqlite"].pop(1, [queue_name])]
        assert job is not None
        stored = json.dumps(job.args)
        queues["sqlite"].release(job)
        assert "127.0.0.1" not in stored and str(smtp_server.port) not in stored  # the worker's settings alone
        assert smtp_server.received.envelopes == []
        _work(queue_name)
        expected = email.message_from_bytes(
            message.message(policy=email.policy.SMTP).as_bytes(), policy=email.policy.default
        )
    [envelope] = smtp_server.received.envelopes
    assert envelope.mail_from == "sender@example.com"
    assert sorted(envelope.rcpt_tos) == sorted(
        [RECIPIENT, "bob@example.com", "carol@example.com", "dave.hidden@example.com"]
    )
    received = email.message_from_bytes(envelope.content, policy=email.policy.default)
    for name in ("Subject", "From", "To", "Cc", "Reply-To", "X-Campaign", "List-Unsubscribe", "MIME-Version"):
        assert received[name] == expected[name], name
    assert received["Bcc"] is None
    assert received["Message-ID"] and received["Date"]  # fixed when queued: every attempt sends the same
    assert _parts(received) == _parts(expected)
    assert ("image/png", "pixel.png", PNG) in _parts(received)  # bytes intact, byte for byte
    assert received["Subject"] == message.subject


def test_with_smtp_down_the_job_is_retried_then_recorded_and_nothing_names_the_recipient(
    closed_port: int, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    with queued_mail("sqlite", queue_name, mailers=_smtp(closed_port), MAILER="smtp", MAX_ATTEMPTS=2):
        message = EmailMessage(SUBJECT, BODY, "sender@example.com", [RECIPIENT], cc=["cc.person@example.com"])
        assert message.send() == 1
        with caplog.at_level(logging.DEBUG, logger="kinetis_queue"):
            _work(queue_name, jobs=2)  # the first attempt is released (retry), the second fails for good
        assert queues["sqlite"].size(queue_name) == 0
    record = FailedJob.objects.get(queue=queue_name)
    assert (record.job_class, record.attempts) == ("kinetis_queue.contrib.mail.jobs.SendMailJob", 2)
    assert record.exception_class == "kinetis_queue.contrib.mail.jobs.MailNotSentError"
    assert "ConnectionRefusedError: [Errno 111] Connection refused" in record.exception_message
    assert json.loads(shown_args(record)) == {"message": "[redacted]"}
    logged = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)
    assert "failed (attempt 1), retrying" in logged and "failed permanently (attempt 2 of 2)" in logged
    listing = StringIO()
    call_command("queue_failed", f"--queue={queue_name}", stdout=listing)
    assert "SendMailJob  MailNotSentError  2/2" in listing.getvalue()  # never arguments nor the message
    shown = " ".join([shown_args(record), *shown_exception(record), logged, listing.getvalue()])
    for secret in (RECIPIENT, "cc.person@example.com", SUBJECT, BODY):
        assert secret not in shown
        assert secret not in record.exception_message + record.traceback


def test_a_refused_recipient_fails_the_job_without_its_address_in_the_record(
    smtp_server: SmtpServer, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The server's reply quotes the address (SMTPRecipientsRefused): only the reply code is kept."""
    smtp_server.received.refused.add(RECIPIENT)
    with queued_mail("sqlite", queue_name, mailers=_smtp(smtp_server.port), MAILER="smtp", MAX_ATTEMPTS=1):
        assert EmailMessage(SUBJECT, BODY, "sender@example.com", [RECIPIENT]).send() == 1
        with caplog.at_level(logging.INFO, logger="kinetis_queue"):
            _work(queue_name)
    record = FailedJob.objects.get(queue=queue_name)
    assert record.exception_message == (
        "sending through the MAILERS alias 'smtp' failed: smtplib.SMTPRecipientsRefused: "
        "1 recipient(s) refused (reply codes 550)"
    )
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "failed permanently" in logged
    for text in (record.exception_message, record.traceback, logged, shown_args(record)):
        assert RECIPIENT not in text and BODY not in text
    assert smtp_server.received.envelopes == []
