"""An EmailMessage as JSON and back: what a queued message carries, and what it never does.

The payload (version ``PAYLOAD_VERSION``) holds the message's own fields only: subject, body, from,
to, cc, bcc, reply-to, extra headers, alternatives and attachments. Bytes travel as base64, text as
text; a ``MIMEPart`` (or a legacy ``MIMEBase``) attachment travels as its serialized bytes and comes
back as an ``email.message.EmailMessage`` part. No connection, backend, credential or setting is
ever written: the worker sends through its own configuration (``MailSettings``).

Every error here names the field and position at fault (``attachments[2]``), never a value: the
message content (recipients, bodies) is sensitive.
"""

from __future__ import annotations

import base64
import binascii
import email
import email.message
import email.policy
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any, Final

import django
from django.conf import settings
from django.core.mail import EmailAttachment, EmailMessage, EmailMultiAlternatives
from django.core.mail.message import make_msgid
from django.core.mail.utils import DNS_NAME
from django.utils.encoding import force_str
from django.utils.timezone import get_current_timezone

from kinetis_queue.exceptions import JobReconstructionError, KinetisQueueError
from kinetis_queue.payload.envelope import dumps

#: The payload's format; a worker refuses any other (the contract: mail jobs carry an inner version).
PAYLOAD_VERSION: Final = 1
#: The message fields that are lists of addresses.
ADDRESS_FIELDS: Final = ("to", "cc", "bcc", "reply_to")


class UnqueueableMailError(KinetisQueueError, ValueError):
    """A message QueuedEmailBackend cannot queue: a field of a type it cannot carry, or too large.

    The message names the field (``attachments[1]``) and the limit, never the message's content.
    """


def to_payload(message: EmailMessage, max_bytes: int) -> dict[str, Any]:
    """``message`` as the JSON-safe dict a mail job stores; raises UnqueueableMailError.

    A Message-ID and a Date are fixed now when the message has none, so every attempt of the job
    sends the same message (a retry after a lost reply can then be recognised as a duplicate).
    """
    headers = {str(name): _header_value(name, value) for name, value in message.extra_headers.items()}
    names = {name.lower() for name in headers}
    if "message-id" not in names:
        headers["Message-ID"] = make_msgid(domain=DNS_NAME)
    if "date" not in names:
        # As EmailMessage.message() would date it: UTC unless EMAIL_USE_LOCALTIME.
        zone = get_current_timezone() if settings.EMAIL_USE_LOCALTIME else UTC
        headers["Date"] = format_datetime(datetime.now(zone))
    payload: dict[str, Any] = {
        "version": PAYLOAD_VERSION,
        "subject": _text(message.subject, "subject"),
        "body": _text(message.body, "body"),
        "from_email": _text(message.from_email, "from_email"),
        **{field: _addresses(getattr(message, field), field) for field in ADDRESS_FIELDS},
        "headers": headers,
        "content_subtype": _text(message.content_subtype, "content_subtype"),
        "encoding": None if message.encoding is None else _text(message.encoding, "encoding"),
        "attachments": [_attachment(item, f"attachments[{index}]") for index, item in enumerate(message.attachments)],
        "alternatives": None,
    }
    alternatives = getattr(message, "alternatives", None)
    if alternatives is not None:
        payload["alternatives"] = [
            _alternative(item, f"alternatives[{index}]") for index, item in enumerate(alternatives)
        ]
    size = len(dumps(payload).encode())
    if size > max_bytes:
        raise UnqueueableMailError(
            f"the queued message would be {size} bytes of JSON (attachments in base64), above the limit of "
            f"{max_bytes} (KINETIS_QUEUE['MAIL']['MAX_BYTES'])"
        )
    return payload


def from_payload(payload: Mapping[str, Any]) -> EmailMessage:
    """The message a payload describes: an EmailMultiAlternatives when it had alternatives, else an
    EmailMessage, with no connection. Raises JobReconstructionError naming the bad field."""
    if payload.get("version") != PAYLOAD_VERSION:
        raise JobReconstructionError(
            f"the queued message has payload version {_version(payload)}; this worker reads version {PAYLOAD_VERSION}"
        )
    fields = {field: _stored_addresses(payload, field) for field in ADDRESS_FIELDS}
    common: dict[str, Any] = {
        "subject": _stored_text(payload, "subject"),
        "body": _stored_text(payload, "body"),
        "from_email": _stored_text(payload, "from_email"),
        "headers": _stored_headers(payload),
        **fields,
    }
    alternatives = payload.get("alternatives")
    message: EmailMessage
    if alternatives is None:
        message = EmailMessage(**common)
    else:
        if not isinstance(alternatives, list):
            raise _bad("alternatives")
        message = EmailMultiAlternatives(**common)
        for index, item in enumerate(alternatives):
            message.attach_alternative(*_stored_alternative(item, f"alternatives[{index}]"))
    message.content_subtype = _stored_text(payload, "content_subtype")
    encoding = payload.get("encoding")
    if encoding is not None:
        message.encoding = _stored_text(payload, "encoding")
    attachments = payload.get("attachments")
    if not isinstance(attachments, list):
        raise _bad("attachments")
    message.attachments = [_stored_attachment(item, f"attachments[{index}]") for index, item in enumerate(attachments)]
    return message


# -- to the payload --------------------------------------------------------------------------------


def _text(value: Any, where: str) -> str:
    text = force_str(value, strings_only=True)  # a lazy translation is rendered now, in the sender's language
    if not isinstance(text, str):
        raise UnqueueableMailError(f"the message's {where} is a {type(value).__name__}, not text")
    return text


def _addresses(values: Any, field: str) -> list[str]:
    return [_text(value, f"{field}[{index}]") for index, value in enumerate(values or ())]


def _header_value(name: Any, value: Any) -> str:
    if isinstance(value, datetime):
        return format_datetime(value)  # a Date given as a datetime, as Python's email would write it
    if isinstance(value, str | int):
        return str(value)
    return _text(value, f"header {force_str(name)!r}")


def _bytes(content: bytes | bytearray | memoryview) -> str:
    return base64.b64encode(bytes(content)).decode("ascii")


def _content(content: Any, where: str) -> dict[str, str]:
    """``{"text": ...}`` for text, ``{"base64": ...}`` for bytes (sent back as the very same type)."""
    if isinstance(content, bytes | bytearray | memoryview):
        return {"base64": _bytes(content)}
    if isinstance(content, EmailMessage):  # a message/rfc822 attachment given as a Django message
        return {"base64": _bytes(content.message().as_bytes())}
    if isinstance(content, email.message.Message):
        return {"base64": _bytes(content.as_bytes(policy=email.policy.default))}
    return {"text": _text(content, where)}


def _attachment(item: Any, where: str) -> dict[str, Any]:
    if isinstance(item, email.message.Message):
        if django.VERSION < (6, 0):
            raise UnqueueableMailError(
                f"the message's {where} is a MIME object: queued mail carries those on Django 6.0+ (its "
                "MIMEPart attachments); attach (filename, content, mimetype) instead"
            )
        # A MIMEPart, or Django's deprecated MIMEBase: its serialized bytes, parsed again on the worker.
        try:
            raw = item.as_bytes(policy=email.policy.default)
        except Exception as exc:
            raise UnqueueableMailError(f"the message's {where} cannot be serialized ({type(exc).__name__})") from None
        return {"part": _bytes(raw)}
    if isinstance(item, tuple) and len(item) == 3:
        filename, content, mimetype = item
        if filename is not None and not isinstance(filename, str):
            raise UnqueueableMailError(f"the message's {where} has a filename that is not text or None")
        return {"filename": filename, "mimetype": _text(mimetype, f"{where} mimetype"), **_content(content, where)}
    raise UnqueueableMailError(
        f"the message's {where} is a {type(item).__name__}: queued mail carries (filename, content, mimetype) "
        "attachments and email.message.MIMEPart objects"
    )


def _alternative(item: Any, where: str) -> dict[str, Any]:
    if not (isinstance(item, tuple) and len(item) == 2):
        raise UnqueueableMailError(f"the message's {where} is not a (content, mimetype) pair")
    content, mimetype = item
    return {"mimetype": _text(mimetype, f"{where} mimetype"), **_content(content, where)}


# -- from the payload ------------------------------------------------------------------------------


def _version(payload: Mapping[str, Any]) -> str:
    version = payload.get("version")
    return str(version) if type(version) is int else "(not a number)"


def _bad(where: str) -> JobReconstructionError:
    return JobReconstructionError(f"the queued message's {where} is malformed")


def _stored_text(payload: Mapping[str, Any], field: str) -> str:
    value = payload.get(field)
    if not isinstance(value, str):
        raise _bad(field)
    return value


def _stored_addresses(payload: Mapping[str, Any], field: str) -> list[str]:
    values = payload.get(field)
    if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
        raise _bad(field)
    return values


def _stored_headers(payload: Mapping[str, Any]) -> dict[str, str]:
    headers = payload.get("headers")
    if not isinstance(headers, dict) or not all(isinstance(value, str) for value in headers.values()):
        raise _bad("headers")
    return headers


def _decoded(item: Mapping[str, Any], where: str) -> bytes | str:
    if isinstance(item.get("text"), str):
        return str(item["text"])
    encoded = item.get("base64")
    if not isinstance(encoded, str):
        raise _bad(where)
    try:
        return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise _bad(where) from None


def _stored_attachment(item: Any, where: str) -> Any:
    if not isinstance(item, dict):
        raise _bad(where)
    if "part" in item:
        raw = item["part"]
        try:
            data = base64.b64decode(raw, validate=True) if isinstance(raw, str) else None
        except (binascii.Error, ValueError):
            data = None
        if data is None:
            raise _bad(where)
        return email.message_from_bytes(data, policy=email.policy.default)
    filename, mimetype = item.get("filename"), item.get("mimetype")
    if (filename is not None and not isinstance(filename, str)) or not isinstance(mimetype, str):
        raise _bad(where)
    return EmailAttachment(filename, _decoded(item, where), mimetype)


def _stored_alternative(item: Any, where: str) -> tuple[bytes | str, str]:
    if not isinstance(item, dict) or not isinstance(item.get("mimetype"), str):
        raise _bad(where)
    return _decoded(item, where), item["mimetype"]
