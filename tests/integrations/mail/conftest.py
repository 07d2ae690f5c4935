"""Queued email's fixtures: the settings that route mail through a connection, and a real SMTP server.

``smtp_server`` is aiosmtpd's SMTP server on a free loopback port, started and stopped by the test;
``closed_port`` is a loopback port nothing listens on (SMTP down).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import django
import pytest
from django.conf import settings
from django.test import override_settings

QUEUED = "kinetis_queue.contrib.mail.QueuedEmailBackend"
LOCMEM = "django.core.mail.backends.locmem.EmailBackend"
SMTP = "django.core.mail.backends.smtp.EmailBackend"

#: MAILERS (and send(using=...)) is Django 6.1's; older versions configure EMAIL_BACKEND alone.
HAS_MAILERS = django.VERSION >= (6, 1)
needs_mailers = pytest.mark.skipif(not HAS_MAILERS, reason="MAILERS is Django 6.1's")


@contextmanager
def queued_mail(connection: str, queue: str, mailers: dict[str, Any] | None = None, **mail: Any) -> Iterator[None]:
    """QueuedEmailBackend as the default mailer, queuing to ``queue`` on ``connection``; ``mail`` adds
    KINETIS_QUEUE["MAIL"] keys (BACKEND defaults to locmem)."""
    setting = {**settings.KINETIS_QUEUE, "MAIL": {"CONNECTION": connection, "QUEUE": queue, **mail}}
    if "MAILER" not in mail:
        setting["MAIL"].setdefault("BACKEND", LOCMEM)
    with override_settings(
        KINETIS_QUEUE=setting,
        MAILERS={"default": {"BACKEND": QUEUED}, **(mailers or {})},
        SERVER_EMAIL="srv@example.com",
    ):
        yield


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Received:
    """What the SMTP server was handed: one envelope per message."""

    envelopes: list[Any] = field(default_factory=list)
    #: Recipients the server refuses, quoting the address in its reply as real servers do.
    refused: set[str] = field(default_factory=set)

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, options: Any) -> str:
        if address in self.refused:
            return f"550 5.1.1 <{address}>: Recipient address rejected"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.envelopes.append(envelope)
        return "250 Message accepted for delivery"


@dataclass
class SmtpServer:
    port: int
    received: Received


@pytest.fixture
def smtp_server() -> Iterator[SmtpServer]:
    """aiosmtpd's SMTP server on 127.0.0.1 and a free port, for this test only."""
    from aiosmtpd.controller import Controller

    received = Received()
    controller = Controller(received, hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        yield SmtpServer(controller.port, received)
    finally:
        controller.stop()


@pytest.fixture
def closed_port() -> int:
    """A loopback port with nothing listening (bound, then released)."""
    return free_port()
