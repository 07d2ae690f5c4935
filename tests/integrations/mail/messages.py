"""The messages the mail tests send, and how two messages are compared field by field."""

from __future__ import annotations

import email.message
import email.policy
from typing import Any

from django.core.mail import EmailMessage, EmailMultiAlternatives

#: Strings that must never reach a log line, a failed record's shown arguments or an error.
RECIPIENT = "alice.secret@example.com"
BODY = "The body of a private letter"
SUBJECT = "Private subject line"

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4


def pdf_part() -> email.message.MIMEPart:
    part = email.message.MIMEPart(policy=email.policy.default)
    part.set_content(b"%PDF-1.4 fake", maintype="application", subtype="pdf", filename="report.pdf")
    return part


def full_message() -> EmailMultiAlternatives:
    """Every field queued mail carries: alternatives, text/bytes/MIMEPart attachments, headers, cc, bcc."""
    message = EmailMultiAlternatives(
        subject=SUBJECT + " \u00e9t\u00e9",
        body=BODY + "\nsecond line, caf\u00e9\n",
        from_email="Sender Name <sender@example.com>",
        to=[f"Alice <{RECIPIENT}>", "bob@example.com"],
        cc=["carol@example.com"],
        bcc=["dave.hidden@example.com"],
        reply_to=["replies@example.com"],
        headers={"X-Campaign": "spring", "List-Unsubscribe": "<mailto:unsub@example.com>"},
    )
    message.attach_alternative(f"<p>{BODY}</p>", "text/html")
    message.attach("notes.txt", "plain text attachment\n", "text/plain")
    message.attach("pixel.png", PNG, "image/png")
    message.attach(pdf_part())
    return message


def _attachment(item: Any) -> Any:
    if isinstance(item, email.message.Message):
        return ("part", item.get_content_type(), item.get_filename(), item.get_content())
    filename, content, mimetype = item
    return (filename, content, mimetype)


def fields(message: EmailMessage) -> dict[str, Any]:
    """Everything a queued message must keep, except the Message-ID and Date the queue fixes."""
    headers = {k: v for k, v in message.extra_headers.items() if k.lower() not in ("message-id", "date")}
    return {
        "class": type(message).__name__,
        "subject": message.subject,
        "body": message.body,
        "from_email": message.from_email,
        "to": message.to,
        "cc": message.cc,
        "bcc": message.bcc,
        "reply_to": message.reply_to,
        "headers": headers,
        "content_subtype": message.content_subtype,
        "alternatives": [tuple(a) for a in getattr(message, "alternatives", [])],
        "attachments": [_attachment(item) for item in message.attachments],
    }
