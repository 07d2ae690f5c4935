"""push_on_commit after the commit: a push_on_commit_failed receiver that raises is contained."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import transaction
from django.test import override_settings

from kinetis_queue import push_on_commit, queues, signals
from tests import jobs
from tests.integrations.test_dispatch import DEAD_STORE


def test_a_raising_failure_receiver_stops_nothing(queue_name: str, caplog: pytest.LogCaptureFixture) -> None:
    """It is logged by exception class only; the application's later hooks and pushes still run."""

    def receiver(sender: object, **kwargs: object) -> None:
        raise ValueError("the receiver is broken")

    signals.push_on_commit_failed.connect(receiver)
    ran: list[str] = []
    setting = {**settings.KINETIS_QUEUE, "CONNECTIONS": {**settings.KINETIS_QUEUE["CONNECTIONS"], "dead": DEAD_STORE}}
    try:
        with override_settings(KINETIS_QUEUE=setting), caplog.at_level("ERROR", logger="kinetis_queue"):
            with transaction.atomic():
                job_id = push_on_commit(jobs.Noop(), queue=queue_name, connection="dead")
                push_on_commit(jobs.Noop(), queue=queue_name, connection="sqlite")
                transaction.on_commit(lambda: ran.append("application hook"))
    finally:
        signals.push_on_commit_failed.disconnect(receiver)
    assert ran == ["application hook"]
    job = queues["sqlite"].pop(5, [queue_name])
    assert job is not None
    queues["sqlite"].ack(job)
    messages = [r.getMessage() for r in caplog.records if r.name == "kinetis_queue.dispatch"]
    assert len(messages) == 2
    assert job_id in messages[0] and "ConnectionFailedError" in messages[0]
    assert messages[1].startswith("Signal receiver ") and messages[1].endswith(" raised ValueError (contained)")
    assert not any("is broken" in m for m in messages)  # our lines name the class only (Django logs its own)
