"""Names a payload chooses (issue 27, item 7): a forged receiver name reaches the metrics and the history as
one "(unknown)" label, and queue_work's and queue_failed's output and a plain log line with its control
characters escaped."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from django.core.management import call_command
from django.test import Client

from kinetis_queue.contracts import Queue
from kinetis_queue.contrib.receivers import QueuedReceiverJob
from kinetis_queue.management.commands.queue_work import Command as QueueWork
from kinetis_queue.observability.history import WRITER
from kinetis_queue.observability.logs import PlainFormatter
from kinetis_queue.observability.tally import TALLY
from kinetis_queue.payload.registry import UNKNOWN_NAME
from kinetis_queue.worker import Worker
from tests.support.backends import Backend
from tests.support.helpers import connections_only

pytestmark = pytest.mark.trait("stores_jobs")

#: A receiver name no process registered, carrying "clear the screen" and a forged log line.
FORGED = "\x1b[2Jforged.receivers.wipe\nWARNING all good"
#: How an operator reads it: every control character written as its code.
ESCAPED = "\\x1b[2Jforged.receivers.wipe\\x0aWARNING all good"


@pytest.fixture
def counted(backend: Backend) -> Iterator[None]:
    """HISTORY and METRICS on (the process's tally counts pushes and deliveries, the metrics view reads
    it, open to this client), the row's connection the only one besides the default; the history's writer
    stopped after."""
    switches = {"HISTORY": True, "METRICS": True, "ENDPOINTS": {"ALLOW": ["127.0.0.1"]}}
    with connections_only(backend.connection, **switches):
        yield
        WRITER.stop()


@pytest.fixture
def plain_log() -> Iterator[io.StringIO]:
    """The worker's log lines through a plain handler with logging's own formatter, as a project's may be."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
    logger = logging.getLogger("kinetis_queue.worker")
    logger.addHandler(handler)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)


def _fail_forged(queue: Queue, backend: Backend, queue_name: str) -> None:
    """Push a queued-receiver job naming FORGED and let a real worker fail it for good."""
    queue.push(QueuedReceiverJob(FORGED, None, {}), queue=queue_name, max_attempts=1)
    worker = Worker(queue, connection=backend.connection)
    try:
        assert worker.process_next(30, [queue_name]) is True
    finally:
        worker.close()


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_forged_name_is_escaped_in_queue_work_queue_failed_and_a_plain_log_line(
    connection: Queue, backend: Backend, queue_name: str, plain_log: io.StringIO
) -> None:
    connection.push(QueuedReceiverJob(FORGED, None, {}), queue=queue_name, max_attempts=1)
    worked = io.StringIO()
    call_command(
        "queue_work",
        f"--connection={backend.connection}",
        f"--queue={queue_name}",
        "--once",
        "--no-schedule",
        "--no-relay",
        stdout=worked,
    )
    [line] = [line for line in worked.getvalue().splitlines() if "forged.receivers" in line]
    assert ESCAPED in line and "\x1b" not in line  # queue_work's own line about the job
    out = io.StringIO()
    call_command("queue_failed", f"--queue={queue_name}", stdout=out)
    listing = out.getvalue()
    assert ESCAPED in listing
    assert "\x1b" not in listing and "\nWARNING" not in listing
    [line] = [line for line in plain_log.getvalue().splitlines() if "failed permanently" in line]
    assert ESCAPED in line and "\x1b" not in line
    assert "\nWARNING all good" not in plain_log.getvalue()  # no forged line of its own


def test_queue_work_logs_through_the_escaping_formatter_when_the_project_sets_none() -> None:
    logger = logging.getLogger("kinetis_queue")
    handlers, level = logger.handlers[:], logger.level
    for handler in handlers:
        logger.removeHandler(handler)
    added = QueueWork()._attach_log_handler(1)
    try:
        assert added is not None and isinstance(added.formatter, PlainFormatter)
        said = logging.LogRecord("kinetis_queue.jobs", logging.INFO, __file__, 1, "said \x1b[2J%s", ("\nforged",), None)
        assert added.format(said).endswith(" INFO kinetis_queue.jobs said \\x1b[2J\\x0aforged")
    finally:
        if added is not None:
            logger.removeHandler(added)
        for handler in handlers:
            logger.addHandler(handler)
        logger.setLevel(level)


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_forged_name_is_counted_under_one_unknown_label(
    connection: Queue, backend: Backend, queue_name: str, counted: None
) -> None:
    _fail_forged(connection, backend, queue_name)
    connection.push(QueuedReceiverJob("forged.receivers.other", None, {}), queue=queue_name)
    labels = {key[2]: counts for key, counts in TALLY.totals().items() if key[1] == queue_name}
    assert list(labels) == [UNKNOWN_NAME]
    assert labels[UNKNOWN_NAME][0] == 2  # both pushes, under the one label
    page = Client().get("/queue/metrics/").content.decode()
    series = [line for line in page.splitlines() if f'queue="{queue_name}"' in line and "_depth" not in line]
    assert series and all('job="(unknown)"' in line for line in series)
    assert "forged" not in page


def _command_names() -> list[str]:
    from pathlib import Path

    import kinetis_queue.management.commands as package

    return sorted(p.stem for p in Path(package.__path__[0]).glob("queue_*.py"))


@pytest.mark.parametrize("name", _command_names())
def test_every_command_escapes_what_it_writes(name: str) -> None:
    """Every queue_* command writes through the escaping output (QueueCommand), so no name a payload chose
    reaches a terminal as a control sequence, whichever command prints it."""
    import importlib

    from kinetis_queue.management.commands._output import QueueCommand

    command_class = importlib.import_module(f"kinetis_queue.management.commands.{name}").Command
    assert issubclass(command_class, QueueCommand)
    out, err = io.StringIO(), io.StringIO()
    command = command_class(stdout=out, stderr=err)
    command.stdout.write("forged \x1b[2J name")
    command.stderr.write("forged \x1b[2J name")
    assert "\x1b" not in out.getvalue() and "\x1b" not in err.getvalue()
    assert "forged" in out.getvalue() and "forged" in err.getvalue()
