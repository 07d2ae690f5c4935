"""queue_work lines no other test reached: a snooze's delay, jobs left reserved, --processes from code."""

from __future__ import annotations

import io

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import override_settings

from kinetis_queue import Job, queues
from kinetis_queue.job import Snooze
from tests import jobs


class SnoozesHalfAMinute(Job):
    """Cannot start yet: asks to come back in 30 seconds."""

    def handle(self) -> None:
        raise Snooze(30, "the mail server is not up yet")


def test_a_snoozed_job_line_says_when_it_comes_back(queue_name: str) -> None:
    queue = queues["sqlite"]
    queue.push(SnoozesHalfAMinute(), queue=queue_name)
    out = io.StringIO()
    call_command("queue_work", "--connection=sqlite", f"--queue={queue_name}", "--once", "--no-color", stdout=out)
    lines = [line for line in out.getvalue().splitlines() if "SnoozesHalfAMinute" in line]
    assert len(lines) == 1
    assert f"on {queue_name}, attempt 1: snoozed in " in lines[0]
    assert lines[0].endswith("(back in 30s)")
    assert queue.stats(queue_name).delayed == 1  # the replacement waits out its delay
    queues.clearable("sqlite").clear(queue_name)


def test_stop_when_empty_counts_the_jobs_another_worker_holds(queue_name: str) -> None:
    """The last line names reserved jobs it did not wait for (a lease long enough not to expire meanwhile)."""
    setting = {
        **settings.KINETIS_QUEUE,
        "CONNECTIONS": {
            **settings.KINETIS_QUEUE["CONNECTIONS"],
            "held": {"BACKEND": "sql", "DATABASE": "default", "VISIBILITY_TIMEOUT": 300},
        },
    }
    with override_settings(KINETIS_QUEUE=setting):
        queue = queues["held"]
        queue.push(jobs.Noop(), queue=queue_name)
        queue.push(jobs.Noop(), queue=queue_name)
        held = queue.pop(5, [queue_name])
        assert held is not None
        out = io.StringIO()
        call_command(
            "queue_work",
            "--connection=held",
            f"--queue={queue_name}",
            "--stop-when-empty",
            "--sleep=0.1",
            "--no-color",
            stdout=out,
        )
        last = out.getvalue().splitlines()[-1]
        assert last == ("Left behind: 1 reserved (taken by a worker); --stop-when-empty does not wait for them.")
        queue.ack(held)
        assert queue.size(queue_name) == 0


def test_processes_from_code_has_no_command_line_to_repeat() -> None:
    """call_command() has no argv naming queue_work: a clear error, and no process started."""
    out = io.StringIO()
    with pytest.raises(CommandError, match="--processes needs a command line to repeat"):
        call_command("queue_work", "--connection=sqlite", "--processes=2", stdout=out)
    assert out.getvalue() == ""
