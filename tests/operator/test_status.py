"""queue_status and queue_restart: figures that match the store, and arguments checked before any I/O."""

from __future__ import annotations

import copy
import dataclasses
import io
import json
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import override_settings

from kinetis_queue import connections
from kinetis_queue.contracts import DisposableQueue, Queue
from kinetis_queue.models import FailedJob, RestartMarker
from kinetis_queue.observability import status
from kinetis_queue.worker.restart import DatabaseRestartMarker
from tests import jobs
from tests.support.backends import Backend
from tests.support.fixtures import BACKEND_SUPPORT


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.fixture
def long_lease(backend: Backend) -> Iterator[Queue]:
    """The backend's connection with a 300 s visibility timeout, so a reservation stays live while we count."""
    setting = copy.deepcopy(settings.KINETIS_QUEUE)
    setting["CONNECTIONS"][backend.connection]["VISIBILITY_TIMEOUT"] = 300
    with override_settings(KINETIS_QUEUE=setting):
        queue = connections.build(backend.connection)
        support = BACKEND_SUPPORT.get(backend.id)
        if support is not None:
            support.prepare(queue)  # the backend's test set-up (SQS queues on moto, RabbitMQ clean-up)
        try:
            yield queue
        finally:
            if isinstance(queue, DisposableQueue):
                queue.dispose()


def _cell(value: int | None, approximate: bool) -> str:
    """How the table prints a figure: '-' for unknown, '~' before an estimate."""
    return "-" if value is None else f"~{value}" if approximate else str(value)


@pytest.mark.trait("stores_jobs")
def test_queue_status_figures_match_the_store(
    connection: Queue, backend: Backend, long_lease: Queue, queue_name: str
) -> None:
    """Ready, delayed, reserved (a live lease) and failed, as the store holds them; waiting is size().

    SQS's and RabbitMQ's figures are flagged approximate, but here nothing moves while they are read
    (moto's counts are exact; RabbitMQ's ladder counts are exact once a message sits in its tier).
    RabbitMQ cannot tell reserved: AMQP reports a queue's ready messages only, not unacked deliveries.
    """
    queue = long_lease
    queue.push(jobs.Noop(), queue=queue_name)
    queue.push(jobs.Noop(), queue=queue_name)
    queue.push(jobs.Noop(), queue=queue_name, delay=600)  # within every backend's delay limit (SQS: 900 s)
    held = queue.pop(5, [queue_name])
    assert held is not None
    for _ in range(2):
        FailedJob.objects.create(
            connection=backend.connection,
            queue=queue_name,
            job_id="0" * 32,
            job_class="tests.jobs.Noop",
            args="{}",
            attempts=1,
            exception_class="builtins.RuntimeError",
        )
    stats = queue.stats(queue_name)
    assert stats.ready is not None and stats.delayed is not None, "Queue.stats() does not split size()"
    reserved = None if backend.id.split("-")[0] == "rabbitmq" else 1
    approximate = backend.id.split("-")[0] in ("sqs", "rabbitmq")
    assert stats.approximate is approximate

    figures = json.loads(run("queue_status", f"--connection={backend.connection}", f"--queue={queue_name}", "--json"))
    [shown] = figures["connections"]
    assert shown["connection"] == backend.connection and shown["error"] is None
    [row] = shown["queues"]
    # SQS FIFO emulates delays: SQS sees the delayed message as a ready one until a worker meets it.
    ready, delayed = (1, 1) if backend.counts_delayed_push else (2, 0)
    assert (row["queue"], row["ready"], row["delayed"], row["reserved"], row["failed"]) == (
        queue_name,
        ready,
        delayed,
        reserved,
        2,
    )
    assert row["waiting"] == queue.size(queue_name) == 2
    assert row["approximate"] is approximate

    table = run("queue_status", f"--connection={backend.connection}", f"--queue={queue_name}").splitlines()
    header = ["CONNECTION", "BACKEND", "QUEUE", "READY", "DELAYED", "RESERVED", "WAITING", "FAILED", "PAUSED"]
    assert table[0].split() == header
    cells = [_cell(n, approximate) for n in (ready, delayed, reserved, 2)]
    assert table[1].split()[2:] == [queue_name, *cells, "2", "no"]
    assert row["paused"] is False

    queue.ack(held)
    after = queue.stats(queue_name)
    assert (after.ready, after.delayed, after.reserved) == (ready, delayed, None if reserved is None else 0)
    if hasattr(queue, "clear"):
        queue.clear(queue_name)


@pytest.mark.parametrize("backend_id", ["sql-sqlite", "sql-postgres", "redis"])
def test_an_expired_reservation_counts_as_ready(backend_id: str, queue_name: str) -> None:
    """SqueHub: an expired lease is counted as ready because the next claim may recover it."""
    from tests.support.backends import BACKENDS

    name = next(b.connection for b in BACKENDS if b.id == backend_id)
    queue = connections.build(name)  # VISIBILITY_TIMEOUT 1 in the test settings
    try:
        queue.push(jobs.Noop(), queue=queue_name)
        assert queue.pop(5, [queue_name]) is not None
        from tests.support.helpers import wait_until

        stats = wait_until(lambda: (s := queue.stats(queue_name)).ready == 1 and s, timeout=30)
        assert (stats.ready, stats.reserved, stats.waiting) == (1, 0, queue.size(queue_name))
    finally:
        queue.clear(queue_name)  # type: ignore[attr-defined]
        if isinstance(queue, DisposableQueue):
            queue.dispose()


def test_queue_status_without_a_queue_lists_the_backends_queues(queue_name: str) -> None:
    queue = connections.queues["sqlite"]
    queue.push(jobs.Noop(), queue=queue_name)
    FailedJob.objects.create(
        connection=None,
        queue=queue_name + "f",
        job_id="0" * 32,
        job_class="x.Y",
        args="{}",
        attempts=1,
        exception_class="builtins.RuntimeError",
    )
    try:
        out, err = io.StringIO(), io.StringIO()
        try:
            call_command("queue_status", "--connection=sqlite", "--json", stdout=out, stderr=err)
        except CommandError:
            raise AssertionError(out.getvalue() + err.getvalue()) from None
        figures = json.loads(out.getvalue())
    finally:
        connections.queues.clearable("sqlite").clear(queue_name)
    rows = {row["queue"]: row for row in figures["connections"][0]["queues"]}
    assert rows[queue_name]["ready"] == 1
    # A record of the unnamed default connection counts under the default connection's name.
    assert rows[queue_name + "f"]["failed"] == 1


def test_the_sync_connection_has_nothing_waiting() -> None:
    [figures] = status.collect("sync", ["default"])
    assert figures.error is None
    stats = figures.queues[0].stats
    assert (stats.ready, stats.delayed, stats.reserved, stats.waiting) == (0, 0, 0, 0)


def test_a_connection_that_cannot_be_read_is_reported_and_exits_non_zero() -> None:
    broken = {"BACKEND": "tests.support.custom_backends.NotClearable"}
    setting = {
        "DEFAULT_CONNECTION": "sqlite",
        "CONNECTIONS": {"sqlite": {"BACKEND": "sql", "DATABASE": "default"}, "odd": broken},
    }
    with override_settings(KINETIS_QUEUE=setting), pytest.MonkeyPatch.context() as patch:

        def down(self: object, queue: str) -> int:
            raise ConnectionError("server unreachable")

        patch.setattr("tests.support.custom_backends.NotClearable._size", down)
        out, err = io.StringIO(), io.StringIO()
        with pytest.raises(CommandError, match="unavailable for connection"):
            call_command("queue_status", "--queue=default", stdout=out, stderr=err)
    assert "odd  " in out.getvalue() and "(unavailable)" in out.getvalue()
    assert "sqlite" in out.getvalue()
    assert "ConnectionError: server unreachable" in err.getvalue()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["queue_status", "--connection=Bad"], "connection"),
        (["queue_status", "--connection=nosuch"], "not configured"),
        (["queue_status", "--queue=a,a"], "more than once"),
        (["queue_status", "--queue=ok,bad name"], "invalid"),
        (["queue_restart", "--connection=Bad!"], "connection"),
        (["queue_restart", "--connection=nosuch"], "not configured"),
    ],
)
def test_bad_arguments_are_rejected_before_any_output_or_io(args: list[str], message: str) -> None:
    before = list(RestartMarker.objects.values_list("connection", "generation"))
    out = io.StringIO()
    with pytest.raises(CommandError, match=message):
        call_command(*args, stdout=out, stderr=io.StringIO())
    assert out.getvalue() == ""
    assert list(RestartMarker.objects.values_list("connection", "generation")) == before


def test_queue_restart_moves_the_generation_of_one_or_every_connection() -> None:
    """SqueHub: the restart marker is a generation every worker compares between jobs."""
    sqlite, postgres = DatabaseRestartMarker("sqlite"), DatabaseRestartMarker("postgres")
    first, other = sqlite.read(), postgres.read()
    out = run("queue_restart", "--connection=sqlite")
    assert sqlite.read() == first + 1 and postgres.read() == other
    assert f"connection 'sqlite' (generation {first + 1})" in out
    with override_settings(
        KINETIS_QUEUE={
            "DEFAULT_CONNECTION": "sqlite",
            "CONNECTIONS": {"sqlite": {"BACKEND": "sql"}, "postgres": {"BACKEND": "sql", "DATABASE": "postgres"}},
        }
    ):
        out = run("queue_restart")
    assert sqlite.read() == first + 2 and postgres.read() == other + 1
    assert len(out.splitlines()) == 2


def test_queue_restart_reports_a_connection_it_cannot_reach_and_restarts_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kinetis_queue import conf

    redis = conf.builtin_backends()["redis"]
    monkeypatch.setitem(conf.builtin_backends(), "redis", dataclasses.replace(redis, client="no_such_client_library"))
    sqlite = DatabaseRestartMarker("sqlite")
    first = sqlite.read()
    setting = {
        "DEFAULT_CONNECTION": "sqlite",
        "CONNECTIONS": {"sqlite": {"BACKEND": "sql"}, "fast": {"BACKEND": "redis", "URL": "redis://127.0.0.1:6379/0"}},
    }
    out, err = io.StringIO(), io.StringIO()
    with override_settings(KINETIS_QUEUE=setting):
        with pytest.raises(CommandError, match="restart not requested for connection"):
            call_command("queue_restart", stdout=out, stderr=err)
        assert sqlite.read() == first + 1
        assert "connection 'sqlite'" in out.getvalue()
        assert "connection 'fast'" in err.getvalue() and "pip install 'kinetis-queue[redis]'" in err.getvalue()
        with pytest.raises(CommandError, match="client library"):
            call_command("queue_restart", "--connection=fast", stdout=(named := io.StringIO()))
        assert named.getvalue() == ""
