"""A real ``queue_work`` in a subprocess, with the history's observers attached.

``python -m tests.faults.worker <queue_work options>`` sets Django up, connects receivers of the
four outcome signals and a log handler for malformed messages (each writes a history event), then
runs the ``queue_work`` command unchanged. The observers are contained by the worker like any other
(contract: "Observers never decide"), so they cannot change an outcome.

Test knobs, read from the environment:

- ``KQ_VISIBILITY_TIMEOUT``: the visibility timeout of every connection, in seconds;
- ``KQ_NO_RENEWAL=1``: the heartbeat never renews (the negative control of a lease race);
- ``KQ_PORT``: the port of a fault proxy in front of the connections' server;
- ``KQ_CRASHPOINT``: read by ``kinetis_queue.crashpoints`` itself.
"""

from __future__ import annotations

import copy
import logging
import os
import sys
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import Any

from tests.faults import history

SIGNALS = {
    "job_succeeded": "settle.ack.ok",
    "job_released": "settle.release.ok",
    "job_failed_permanently": "settle.fail.ok",
}


def _tag(job: Any) -> str | None:
    args = getattr(job, "args", None)
    tag = args.get("tag") if isinstance(args, dict) else None
    # A job whose class does not resolve reaches the receivers with every argument redacted.
    return tag if isinstance(tag, str) and tag != "[redacted]" else None


class MalformedLogHandler(logging.Handler):
    """Turns the worker's warning about a removed malformed message into a ``malformed.settled`` event."""

    def emit(self, record: logging.LogRecord) -> None:
        from kinetis_queue.exceptions import MalformedJobSettledError

        args = record.args if isinstance(record.args, tuple) else ()
        found = any(isinstance(a, MalformedJobSettledError) for a in args) or (
            record.exc_info is not None and isinstance(record.exc_info[1], MalformedJobSettledError)
        )
        if found:
            history.record("malformed.settled", None)


def install_observers() -> Callable[[], None]:
    """Connect the history's signal receivers and log handler; return what disconnects them."""
    from kinetis_queue import signals

    connected: list[tuple[Any, Any]] = []
    for name, event in SIGNALS.items():
        def receiver(sender: Any, job: Any = None, _event: str = event, **kwargs: Any) -> None:
            history.record(_event, _tag(job), attempt=getattr(job, "attempts", None), job_id=getattr(job, "id", None),
                           failed_job_id=kwargs.get("failed_job_id"))

        getattr(signals, name).connect(receiver, weak=False)
        connected.append((getattr(signals, name), receiver))

    def lost(sender: Any, job: Any = None, operation: Any = None, **kwargs: Any) -> None:
        history.record(f"settle.{getattr(operation, 'value', operation)}.stale", _tag(job),
                       attempt=getattr(job, "attempts", None), job_id=getattr(job, "id", None))

    signals.job_settlement_lost.connect(lost, weak=False)
    connected.append((signals.job_settlement_lost, lost))
    handler = MalformedLogHandler(level=logging.WARNING)
    worker_logger = logging.getLogger("kinetis_queue")
    worker_logger.addHandler(handler)

    def disconnect() -> None:
        for signal, receiver in connected:
            signal.disconnect(receiver)
        worker_logger.removeHandler(handler)

    return disconnect


def where(tb: TracebackType | None) -> str:
    """Which worker step an escaping exception came from: settle, record, pop or other."""
    names = [frame.name for frame in traceback.extract_tb(tb)]
    for step, markers in (("record", ("record",)), ("settle", ("_settle", "ack", "release", "fail")),
                          ("pop", ("pop", "_sweep"))):
        if any(name in markers for name in names):
            return step
    return "other"


def _apply_knobs() -> None:
    from urllib.parse import urlsplit, urlunsplit

    from django.conf import settings

    # KQ_PORT=<port>: every connection of this worker reaches its server through a fault proxy there.
    port = os.environ.get("KQ_PORT")
    if port:
        setting = copy.deepcopy(settings.KINETIS_QUEUE)
        for entry in setting["CONNECTIONS"].values():
            if "DATABASE" in entry:
                settings.DATABASES[entry["DATABASE"]]["PORT"] = port
            if "URL" in entry:
                parts = urlsplit(entry["URL"])
                entry["URL"] = urlunsplit(parts._replace(netloc=f"{parts.hostname}:{port}"))
        settings.KINETIS_QUEUE = setting

    seconds = os.environ.get("KQ_VISIBILITY_TIMEOUT")
    if seconds:
        setting = copy.deepcopy(settings.KINETIS_QUEUE)
        for entry in setting["CONNECTIONS"].values():
            if entry.get("BACKEND") != "sync":
                entry["VISIBILITY_TIMEOUT"] = int(seconds)
        settings.KINETIS_QUEUE = setting
    if os.environ.get("KQ_NO_RENEWAL") == "1":
        from kinetis_queue.heartbeat import Heartbeat

        Heartbeat.start = lambda self, job: None  # type: ignore[method-assign]


def main(argv: list[str]) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    os.environ.setdefault("KQ_HISTORY_ROLE", "worker")
    import django

    django.setup()
    _apply_knobs()
    from django.core.management import call_command

    import tests.faults.jobs  # noqa: F401  the job classes, known before the first pop

    install_observers()
    before = set(sys.modules)
    history.record("worker.start", None, argv=argv)
    try:
        call_command("queue_work", *argv)
    except BaseException as exc:
        history.record("worker.stop", None, error=type(exc).__name__, step=where(exc.__traceback__))
        raise
    history.record("worker.exit", None, new_modules=sorted(set(sys.modules) - before))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
