"""push_on_commit after the commit with a logging setup that raises: the failure is still signalled."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import transaction
from django.test import override_settings

from kinetis_queue import push_on_commit, queues, signals
from tests import jobs
from tests.integrations.test_dispatch import DEAD_STORE


class Broken(logging.Filter):
    """A filter that raises: Logger.handle() lets its exception out of logger.error()."""

    def filter(self, record: logging.LogRecord) -> bool:
        raise RuntimeError("the logging setup is broken")


def test_a_raising_logger_stops_neither_the_signal_nor_the_later_hooks(queue_name: str) -> None:
    failed: list[dict[str, Any]] = []

    def receiver(sender: object, **kwargs: Any) -> None:
        failed.append(kwargs)

    logger = logging.getLogger("kinetis_queue.dispatch")
    broken = Broken()
    logger.addFilter(broken)
    signals.push_on_commit_failed.connect(receiver)
    ran: list[str] = []
    setting = {**settings.KINETIS_QUEUE, "CONNECTIONS": {**settings.KINETIS_QUEUE["CONNECTIONS"], "dead": DEAD_STORE}}
    try:
        with override_settings(KINETIS_QUEUE=setting):
            with transaction.atomic():
                job_id = push_on_commit(jobs.Noop(), queue=queue_name, connection="dead")
                push_on_commit(jobs.Noop(), queue=queue_name, connection="sqlite")
                transaction.on_commit(lambda: ran.append("application hook"))
    finally:
        signals.push_on_commit_failed.disconnect(receiver)
        logger.removeFilter(broken)
    assert [(f["job_id"], f["queue"], f["connection"]) for f in failed] == [(job_id, queue_name, "dead")]
    assert ran == ["application hook"]
    job = queues["sqlite"].pop(5, [queue_name])
    assert job is not None
    queues["sqlite"].ack(job)


def test_a_failure_handler_that_raises_is_contained_and_the_later_hooks_run(queue_name: str, caplog: Any) -> None:
    """push_after_commit's on_failure (the task backend marks its result FAILED there) may itself fail:
    that is logged by class only, and the transaction's later hooks still run."""
    from kinetis_queue.dispatch import push_after_commit

    handled: list[str] = []

    def on_failure(exc: Exception) -> None:
        handled.append(type(exc).__name__)
        raise RuntimeError("s3cret detail of the handler")

    setting = {**settings.KINETIS_QUEUE, "CONNECTIONS": {**settings.KINETIS_QUEUE["CONNECTIONS"], "dead": DEAD_STORE}}
    ran: list[str] = []
    with override_settings(KINETIS_QUEUE=setting), caplog.at_level(logging.ERROR, logger="kinetis_queue.dispatch"):
        dead = queues["dead"]  # disposed when override_settings restores KINETIS_QUEUE
        with transaction.atomic():
            push_after_commit(
                dead, dead.prepare(jobs.Noop(), 0, queue_name, None), using="default", on_failure=on_failure
            )
            transaction.on_commit(lambda: ran.append("application hook"))
    assert len(handled) == 1 and ran == ["application hook"]
    contained = [r.getMessage() for r in caplog.records if "failure handler" in r.getMessage()]
    assert len(contained) == 1 and "RuntimeError" in contained[0] and "s3cret" not in contained[0]
