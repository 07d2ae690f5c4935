"""Queued signal receivers: each send() pushes a job; the worker imports and calls the receiver."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connections as db_connections
from django.db import transaction
from django.dispatch import Signal

from kinetis_queue import queues
from kinetis_queue.contrib.receivers import queued_receiver
from kinetis_queue.exceptions import InvalidQueueArgumentError, JobReconstructionError, UnserializableJobError
from kinetis_queue.models import FailedJob
from kinetis_queue.payload.redaction import shown_args
from kinetis_queue.worker import Worker
from tests import operator_receivers as r

SECRET = "card-4111-1111-1111-1111"


class Shop:
    """A sender class: the receiver gets its dotted path."""


@pytest.fixture(autouse=True)
def _fresh() -> Iterator[None]:
    for name in (r.QUEUE, r.FAILING_QUEUE, r.COMMIT_QUEUE):
        queues.clearable("sqlite").clear(name)
    r.CALLS.clear()
    yield
    r.CALLS.clear()


def work(queue_name: str) -> None:
    worker = Worker(queues["sqlite"], retry_base_delay=0)
    try:
        assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()


def test_a_send_pushes_a_job_and_the_worker_calls_the_receiver() -> None:
    responses = r.order_placed.send(Shop, order_id=42, lines=[{"sku": "A-1", "qty": 2}], note=None)
    [(_, job_id)] = responses
    assert r.CALLS == []  # nothing ran in the sending process
    assert queues["sqlite"].size(r.QUEUE) == 1
    with db_connections["default"].cursor() as cursor:
        cursor.execute("SELECT job_id, job_class, args FROM kinetis_queue_jobs WHERE queue = %s", [r.QUEUE])
        [(stored_id, job_class, args)] = cursor.fetchall()
    assert (stored_id, job_class) == (job_id, "kinetis_queue.contrib.receivers.QueuedReceiverJob")
    assert json.loads(args)["receiver"] == "tests.operator_receivers.send_receipt"
    work(r.QUEUE)
    assert r.CALLS == [
        (
            "send_receipt",
            "tests.integrations.test_receivers.Shop",
            {"order_id": 42, "lines": [{"sku": "A-1", "qty": 2}], "note": None},
        )
    ]
    assert queues["sqlite"].size(r.QUEUE) == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"order_id": 1, "lines": [("A", 2)]}, "signal argument 'lines'[0]: a tuple is not allowed"),
        ({"order": object()}, "signal argument 'order'"),
        ({"total": float("nan")}, "signal argument 'total'"),
    ],
)
def test_arguments_outside_the_contract_fail_the_send_and_push_nothing(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(UnserializableJobError) as raised:
        r.order_placed.send(Shop, **kwargs)
    assert message in str(raised.value)
    assert "A-1" not in str(raised.value) and "nan" not in str(raised.value)
    assert queues["sqlite"].size(r.QUEUE) == 0


def test_a_failing_receiver_is_retried_and_recorded_with_its_arguments_redacted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    r.order_refunded.send("checkout", card=SECRET, amount=10)
    with caplog.at_level(logging.INFO, logger="kinetis_queue"):
        work(r.FAILING_QUEUE)
    assert r.CALLS == [("refund_card", "checkout", {"card": SECRET, "amount": 10})]
    text = "\n".join(record.getMessage() for record in caplog.records)
    assert "failed permanently" in text and SECRET not in text
    record = FailedJob.objects.filter(queue=r.FAILING_QUEUE).latest("id")
    shown = json.loads(shown_args(record))
    assert shown == {"receiver": "tests.operator_receivers.refund_card", "sender": "checkout", "kwargs": "[redacted]"}


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_payload_naming_an_unregistered_function_is_never_called() -> None:
    r.order_placed.send(Shop, order_id=1)
    with db_connections["default"].cursor() as cursor:
        cursor.execute(
            "UPDATE kinetis_queue_jobs SET args = %s WHERE queue = %s",
            [json.dumps({"receiver": "os.system", "sender": None, "kwargs": {"command": "true"}}), r.QUEUE],
        )
    # The job's own failure: max_attempts=2 means one retry, then a record.
    work(r.QUEUE)
    work(r.QUEUE)
    record = FailedJob.objects.filter(queue=r.QUEUE).latest("id")
    assert record.exception_class == f"{JobReconstructionError.__module__}.JobReconstructionError"
    assert record.exception_message == (
        "queued receiver 'os.system' cannot be resolved: it is not a function registered by @queued_receiver"
    )
    assert r.CALLS == []


def test_on_commit_pushes_only_when_the_transaction_commits() -> None:
    with transaction.atomic():
        r.order_cancelled.send(Shop, order_id=7)
        transaction.set_rollback(True)
    assert queues["sqlite"].size(r.COMMIT_QUEUE) == 0
    with transaction.atomic():
        r.order_cancelled.send(Shop, order_id=8)
        assert queues["sqlite"].size(r.COMMIT_QUEUE) == 0
    assert queues["sqlite"].size(r.COMMIT_QUEUE) == 1
    work(r.COMMIT_QUEUE)
    assert r.CALLS == [("release_stock", "tests.integrations.test_receivers.Shop", {"order_id": 8})]


def test_the_decorator_validates_its_options_and_wants_a_module_level_function() -> None:
    signal = Signal()
    with pytest.raises(InvalidQueueArgumentError):
        queued_receiver(signal, queue="not valid")
    with pytest.raises(InvalidQueueArgumentError):
        queued_receiver(signal, max_attempts=-1)

    def local(sender: Any, **kwargs: Any) -> None:
        pass

    with pytest.raises(TypeError, match="module-level function"):
        queued_receiver(signal)(local)
    assert signal.receivers == []
