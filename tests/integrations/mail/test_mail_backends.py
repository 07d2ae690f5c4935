"""Queued email on every backend: send_mail, send_mass_mail and EmailMultiAlternatives.send() each queue
one job per message, and a worker delivers through the real backend (locmem) a message equal to the
one sent (docs/mail.md)."""

from __future__ import annotations

import pytest
from django.core import mail
from django.core.mail import EmailMessage, send_mail, send_mass_mail

from kinetis_queue.contracts import Queue
from kinetis_queue.worker import Worker
from tests.integrations.mail.conftest import needs_mailers, queued_mail
from tests.integrations.mail.messages import BODY, RECIPIENT, fields, full_message
from tests.support.backends import Backend

pytestmark = needs_mailers


def _work(connection: Queue, queue_name: str) -> None:
    worker = Worker(connection, retry_base_delay=0)
    try:
        worker.run(1, [queue_name], stop_when_empty=True)
    finally:
        worker.close()


def test_every_message_is_one_job_and_arrives_equal_to_the_one_sent(
    connection: Queue, backend: Backend, queue_name: str, request: pytest.FixtureRequest
) -> None:
    """Each API queues one job per message; the worker's real backend receives every field unchanged."""
    if backend.setup == "sqs_queues":  # the mail backend's own client looks the queue up: create it first
        sqs_name = getattr(connection, "sqs_name", None)  # a FIFO connection's names end in .fifo
        request.getfixturevalue("sqs_queues").create(queue_name if sqs_name is None else sqs_name(queue_name))
    sent: list[EmailMessage] = []
    with queued_mail(backend.connection, queue_name):
        assert send_mail("One", BODY, "from@example.com", [RECIPIENT], html_message="<b>one</b>") == 1
        mass = [("Two", "b2", "f@example.com", ["x@example.com"]), ("Three", "b3", None, ["y@x.org"])]
        assert send_mass_mail(mass) == 2
        message = full_message()
        assert message.send() == 1
        assert EmailMessage("Nobody", "no recipients").send() == 0  # nothing to send: nothing queued
        sent.append(message)
        if backend.stores_jobs:
            assert mail.outbox == []  # queued, not sent
            assert connection.size(queue_name) == 4
            _work(connection, queue_name)
            assert connection.size(queue_name) == 0
    delivered = {m.subject: m for m in mail.outbox}
    assert sorted(delivered) == sorted(["One", "Two", "Three", message.subject])
    assert fields(delivered[message.subject]) == fields(message)
    one = delivered["One"]
    assert (one.body, one.to, one.from_email) == (BODY, [RECIPIENT], "from@example.com")
    assert one.alternatives == [("<b>one</b>", "text/html")]
    assert delivered["Three"].from_email == "webmaster@localhost"  # DEFAULT_FROM_EMAIL, resolved when queued
    # The queue fixed one Message-ID per message, so every attempt sends the same one.
    assert len({m.extra_headers["Message-ID"] for m in mail.outbox}) == 4
