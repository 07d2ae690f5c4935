"""Queued email's choices (docs/mail.md): what a payload holds, transactions, fail_silently, the size
limit, what it refuses, EMAIL_BACKEND, and the E009 check on KINETIS_QUEUE["MAIL"]."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.conf import settings
from django.core import mail
from django.core.checks import run_checks
from django.core.mail import EmailMessage, send_mail
from django.db import transaction
from django.test import override_settings

from kinetis_queue import queues
from kinetis_queue.contrib.mail import QueuedEmailBackend, UnqueueableMailError
from kinetis_queue.contrib.mail.checks import check_mail
from kinetis_queue.contrib.mail.message import from_payload, to_payload
from kinetis_queue.exceptions import JobReconstructionError
from kinetis_queue.worker import Worker
from tests.integrations.mail.conftest import LOCMEM, QUEUED, needs_mailers, queued_mail
from tests.integrations.mail.messages import BODY, PNG, RECIPIENT, SUBJECT, full_message

pytestmark = needs_mailers


class _Rollback(Exception):
    pass


def _work(queue_name: str) -> None:
    worker = Worker(queues["sqlite"], retry_base_delay=0)
    try:
        worker.run(1, [queue_name], stop_when_empty=True)
    finally:
        worker.close()


def test_the_payload_holds_the_message_fields_only(queue_name: str) -> None:
    with queued_mail("sqlite", queue_name):
        assert full_message().send() == 1
        job = queues["sqlite"].pop(1, [queue_name])
        assert job is not None
        queues["sqlite"].ack(job)
    assert job.job_class == "kinetis_queue.contrib.mail.jobs.SendMailJob"
    assert list(job.args) == ["message"]
    payload = job.args["message"]
    assert set(payload) == {
        "version", "subject", "body", "from_email", "to", "cc", "bcc", "reply_to", "headers",
        "content_subtype", "encoding", "attachments", "alternatives",
    }  # fmt: skip
    assert payload["attachments"][1] == {"filename": "pixel.png", "mimetype": "image/png", "base64": _b64(PNG)}
    assert payload["attachments"][0]["text"] == "plain text attachment\n"  # text stays text


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


def test_inside_a_transaction_the_push_waits_for_the_commit(queue_name: str) -> None:
    """ON_COMMIT (default "default"): a rolled-back transaction sends nothing."""
    with queued_mail("sqlite", queue_name):
        with pytest.raises(_Rollback), transaction.atomic():
            assert send_mail(SUBJECT, BODY, None, [RECIPIENT]) == 1
            raise _Rollback
        assert queues["sqlite"].size(queue_name) == 0
        with transaction.atomic():
            send_mail(SUBJECT, BODY, None, [RECIPIENT])
            assert queues["sqlite"].size(queue_name) == 0  # not before the commit
        assert queues["sqlite"].size(queue_name) == 1
        _work(queue_name)
    assert [m.subject for m in mail.outbox] == [SUBJECT]


def test_fail_silently_returns_the_count_queued_when_the_store_is_down(
    queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    down = {**settings.KINETIS_QUEUE["CONNECTIONS"], "down": {"BACKEND": "redis", "URL": "redis://127.0.0.1:9/0"}}
    messages = [EmailMessage(SUBJECT, BODY, None, [RECIPIENT]), EmailMessage("b", "b", None, ["b@example.com"])]
    with override_settings(KINETIS_QUEUE={**settings.KINETIS_QUEUE, "CONNECTIONS": down}):
        with queued_mail("down", queue_name):
            with caplog.at_level(logging.WARNING, logger="kinetis_queue"):
                assert QueuedEmailBackend(fail_silently=True).send_messages(messages) == 0
            with pytest.raises(Exception) as raised:
                QueuedEmailBackend().send_messages(messages)
    assert "0 of 2 messages were queued" in caplog.text
    for text in (caplog.text, str(raised.value)):
        assert RECIPIENT not in text and BODY not in text


def test_a_message_above_max_bytes_queues_none_of_the_call(queue_name: str) -> None:
    big = EmailMessage(SUBJECT, BODY, None, [RECIPIENT])
    big.attach("big.bin", b"\x00" * 4096, "application/octet-stream")
    with queued_mail("sqlite", queue_name, MAX_BYTES=4096):
        with pytest.raises(UnqueueableMailError) as raised:
            QueuedEmailBackend().send_messages([EmailMessage("ok", "ok", None, ["x@example.com"]), big])
        assert queues["sqlite"].size(queue_name) == 0
    assert "above the limit of 4096 (KINETIS_QUEUE['MAIL']['MAX_BYTES'])" in str(raised.value)


@pytest.mark.parametrize(
    ("attachment", "problem"),
    [
        (("only-two", "items"), "the message's attachments[0] is a tuple"),
        (object(), "the message's attachments[0] is a object"),
        ((b"not a name", "x", "text/plain"), "the message's attachments[0] has a filename that is not text"),
    ],
)
def test_an_attachment_queued_mail_cannot_carry_is_refused_by_position(attachment: Any, problem: str) -> None:
    message = EmailMessage(SUBJECT, BODY, None, [RECIPIENT])
    message.attachments.append(attachment)
    with pytest.raises(UnqueueableMailError) as raised:
        to_payload(message, 10**6)
    assert str(raised.value).startswith(problem)
    assert BODY not in str(raised.value)


def test_a_payload_of_another_version_or_shape_is_refused_without_its_content() -> None:
    payload = to_payload(full_message(), 10**6)
    with pytest.raises(JobReconstructionError, match="payload version 2; this worker reads version 1"):
        from_payload({**payload, "version": 2})
    with pytest.raises(JobReconstructionError, match=r"the queued message's to is malformed"):
        from_payload({**payload, "to": RECIPIENT})
    with pytest.raises(JobReconstructionError, match=r"attachments\[1\] is malformed"):
        from_payload({**payload, "attachments": [payload["attachments"][0], {"mimetype": "x/y", "base64": "%%"}]})


@pytest.mark.filterwarnings("ignore:The EMAIL_BACKEND setting is deprecated")
def test_email_backend_names_the_queued_backend_the_classic_way(queue_name: str) -> None:
    """EMAIL_BACKEND (deprecated by Django 6.1 in favour of MAILERS, still honoured) queues the same way."""
    setting = {**settings.KINETIS_QUEUE, "MAIL": {"CONNECTION": "sqlite", "QUEUE": queue_name, "BACKEND": LOCMEM}}
    with override_settings(EMAIL_BACKEND=QUEUED, KINETIS_QUEUE=setting):
        assert send_mail(SUBJECT, BODY, "from@example.com", [RECIPIENT]) == 1
        assert mail.outbox == []
        _work(queue_name)
    [delivered] = mail.outbox
    assert (delivered.subject, delivered.body, delivered.to) == (SUBJECT, BODY, [RECIPIENT])


@pytest.mark.parametrize(
    ("entry", "error"),
    [
        ([], "KINETIS_QUEUE['MAIL'] must be a dict"),
        ({"QUEUES": "x"}, "KINETIS_QUEUE['MAIL']['QUEUES'] is not a known key"),
        ({"QUEUE": "a b"}, "KINETIS_QUEUE['MAIL']['QUEUE'] must be a queue name"),
        ({"CONNECTION": "nowhere"}, "KINETIS_QUEUE['MAIL']['CONNECTION'] must name one of"),
        ({"MAX_ATTEMPTS": -1}, "KINETIS_QUEUE['MAIL']['MAX_ATTEMPTS'] must be at least 0"),
        ({"MAX_BYTES": 10}, "KINETIS_QUEUE['MAIL']['MAX_BYTES'] must be at least 1024"),
        ({"ON_COMMIT": "nodb"}, "KINETIS_QUEUE['MAIL']['ON_COMMIT'] must name an alias in DATABASES"),
        ({"MAILER": "nope"}, "KINETIS_QUEUE['MAIL']['MAILER'] must name an alias in MAILERS"),
        ({"BACKEND": "nope"}, "KINETIS_QUEUE['MAIL']['BACKEND'] must be the dotted path of an email backend"),
        ({"BACKEND": "no.such.Backend"}, "KINETIS_QUEUE['MAIL']['BACKEND'] names 'no.such.Backend', which cannot be"),
        ({"BACKEND": "kinetis_queue.job.Job"}, "['BACKEND'] names 'kinetis_queue.job.Job', which is not an email"),
        ({"BACKEND": QUEUED}, "KINETIS_QUEUE['MAIL']['BACKEND'] names QueuedEmailBackend: every message would be"),
        ({"MAILER": "default"}, "KINETIS_QUEUE['MAIL']['MAILER'] names QueuedEmailBackend"),
        ({"MAILER": "default", "BACKEND": LOCMEM}, "KINETIS_QUEUE['MAIL'] sets both BACKEND and MAILER"),
    ],
)
def test_a_bad_mail_setting_is_check_e009_naming_the_key(entry: Any, error: str) -> None:
    with override_settings(
        KINETIS_QUEUE={**settings.KINETIS_QUEUE, "MAIL": entry}, MAILERS={"default": {"BACKEND": QUEUED}}
    ):
        [message] = check_mail()
        assert message.id == "kinetis_queue.E009"
        assert error in message.msg
        assert "kinetis_queue.E009" in {m.id for m in run_checks()}  # registered with manage.py check
        queues["sqlite"].size("default")  # the rest of KINETIS_QUEUE still works


def test_a_good_mail_setting_passes_the_check() -> None:
    with override_settings(
        KINETIS_QUEUE={**settings.KINETIS_QUEUE, "MAIL": {"MAILER": "smtp", "QUEUE": "mail", "MAX_ATTEMPTS": None}},
        MAILERS={"default": {"BACKEND": QUEUED}, "smtp": {"BACKEND": "django.core.mail.backends.smtp.EmailBackend"}},
    ):
        assert check_mail() == []
