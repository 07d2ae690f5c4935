"""Bad settings, arguments and handles get a clear error that names what is wrong (blocks no other test reached)."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from kinetis_queue import Job, Sensitive, conf, queues
from kinetis_queue.exceptions import InvalidQueueArgumentError, QueueConfigurationError, StaleJobHandleError
from kinetis_queue.job import Snooze
from kinetis_queue.models import FailedJob, RestartMarker
from kinetis_queue.worker import Worker
from tests import jobs


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("not a dict", "KINETIS_QUEUE must be a dict"),
        ({"CONNECTIONS": {"a": "sync"}}, "['CONNECTIONS']['a'] must be a dict"),
        # The shared default is checked without a backend; the SQS ceiling applies once it reaches one.
        (
            {"VISIBILITY_TIMEOUT": 43201, "CONNECTIONS": {"a": {"BACKEND": "sqs"}}},
            "['CONNECTIONS']['a']['VISIBILITY_TIMEOUT'] must be at most 43200",
        ),
        (
            {"CONNECTIONS": {"a": {"BACKEND": "sql", "PREPARED_STATEMENTS": "yes"}}},
            "['CONNECTIONS']['a']['PREPARED_STATEMENTS'] must be True or False",
        ),
        (
            {"CONNECTIONS": {"a": {"BACKEND": "sql", "OPERATION_TIMEOUT": 0}}},
            "['CONNECTIONS']['a']['OPERATION_TIMEOUT']",
        ),
    ],
)
def test_a_bad_setting_is_rejected_with_its_key_and_rule(value: Any, says: str) -> None:
    with override_settings(KINETIS_QUEUE=value), pytest.raises(QueueConfigurationError) as raised:
        conf.load()
    assert says in str(raised.value)


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"default_max_attempts": -1}, "default_max_attempts must be an int of 0 or more"),
        ({"default_max_attempts": 2.0}, "default_max_attempts must be an int of 0 or more"),
        ({"retry_base_delay": 901}, "retry_base_delay must be a number of seconds from 0 to 900"),
        ({"retry_base_delay": "5"}, "retry_base_delay must be a number of seconds from 0 to 900"),
        ({"job_timeout": 0}, "job_timeout must be None or a positive number"),
        ({"job_timeout": float("inf")}, "job_timeout must be None or a positive number"),
    ],
)
def test_a_worker_with_a_bad_argument_is_refused(arguments: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidQueueArgumentError, match=says):
        Worker(queues["sync"], **arguments)


@pytest.mark.parametrize(
    ("limits", "says"),
    [
        ({"max_jobs": 0}, "max_jobs must be None or a positive int"),
        ({"max_jobs": 1.5}, "max_jobs must be None or a positive int"),
        ({"max_time": -1}, "max_time must be None or a positive number"),
        ({"memory": "64"}, "memory must be None or a positive number"),
    ],
)
def test_a_run_with_a_bad_limit_is_refused_before_it_pops(limits: dict[str, Any], says: str, queue_name: str) -> None:
    queue = queues["sqlite"]
    queue.push(jobs.Noop(), queue=queue_name)
    worker = Worker(queue)
    try:
        with pytest.raises(InvalidQueueArgumentError, match=says):
            worker.run(0.1, [queue_name], **limits)
    finally:
        worker.close()
    assert queue.size(queue_name) == 1  # nothing was taken


@pytest.mark.parametrize("delay", [-1, 901, "5", None, True])
def test_a_snooze_outside_the_retry_ceiling_is_refused(delay: Any) -> None:
    with pytest.raises(ValueError, match="a snooze delay must be a number of seconds from 0 to 900"):
        Snooze(delay, "not yet")


def test_a_job_without_handle_says_which_class_must_define_it() -> None:
    class Unfinished(Job):
        pass

    with pytest.raises(NotImplementedError, match=r"Unfinished must define handle\(\)"):
        Unfinished().handle()


def test_the_sensitive_marker_shows_its_name() -> None:
    """It appears in signatures and help() output as the name users write."""
    assert repr(Sensitive) == "Sensitive"


@pytest.mark.parametrize(
    ("command", "arguments", "says"),
    [
        ("queue_work", ["--backoff=soon"], "must be a number of seconds"),
        ("queue_prune_task_results", ["--hours=many"], "must be a number of hours"),
    ],
)
def test_a_command_option_that_is_not_a_number_is_named(command: str, arguments: list[str], says: str) -> None:
    with pytest.raises(CommandError, match=says):
        call_command(command, *arguments)


def test_a_delivery_is_settled_only_by_the_backend_that_delivered_it(queue_name: str) -> None:
    """A handle from another backend is refused without touching either store; its own backend acks it."""
    redis = queues["redis"]
    redis.push(jobs.Noop(), queue=queue_name)
    job = redis.pop(5, [queue_name])
    assert job is not None
    try:
        with pytest.raises(InvalidQueueArgumentError, match="not delivered by an SQL queue"):
            queues["sqlite"].ack(job)
        with pytest.raises(InvalidQueueArgumentError, match="not delivered by a RabbitMQ queue"):
            queues["rabbitmq"].ack(job)
        for settle in (queues["sync"].ack, queues["sync"].fail):
            with pytest.raises(StaleJobHandleError, match="a sync queue holds no deliveries to settle"):
                settle(job)
        with pytest.raises(StaleJobHandleError, match="a sync queue holds no deliveries to settle"):
            queues["sync"].release(job, 0)
    finally:
        redis.ack(job)
    assert redis.size(queue_name) == 0


def test_the_sync_queue_never_delivers() -> None:
    assert queues["sync"].pop(0.1, ["default"]) is None


def test_records_name_class_queue_and_id_and_never_an_argument() -> None:
    """What the admin shows as a record's title: no argument value."""
    record = FailedJob(job_id="j1", job_class="tests.jobs.Fails", queue="mail", args='{"token": "s3cret"}')
    assert str(record) == "tests.jobs.Fails on mail (j1)"
    assert str(RestartMarker(connection="sqlite", generation=3)) == "restart generation 3 of sqlite"
