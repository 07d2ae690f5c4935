"""A real ``queue_work`` in a subprocess, with the history's observers attached.

``python -m tests.faults.worker <queue_work options>`` sets Django up, connects receivers of the
four outcome signals and a log handler for malformed messages (each writes a history event), then
runs the ``queue_work`` command unchanged. The observers are contained by the worker like any other
(contract: "Observers never decide"), so they cannot change an outcome.

Test knobs, read from the environment:

- ``KQ_VISIBILITY_TIMEOUT``: the visibility timeout of every connection, in seconds;
- ``KQ_NO_RENEWAL=1``: the heartbeat never renews (the negative control of a lease race);
- ``KQ_PORT``: the port of a fault proxy in front of the connections' server;
- ``KQ_HEARTBEAT``: the AMQP heartbeat interval of every RabbitMQ connection, in seconds;
- ``KQ_PREFETCH_HOLD``: seconds a delivery reserved ahead waits for a slot before it is given back
  (kinetis_queue.worker.dispatcher.PREFETCH_HOLD), so that a scenario can keep one held until its stop;
- ``KQ_REGISTRY_INTERVAL``: how often the worker writes its registry row, in seconds (5 in production);
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

from kinetis_queue.middleware import Middleware
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
            history.record(
                _event,
                _tag(job),
                attempt=getattr(job, "attempts", None),
                job_id=getattr(job, "id", None),
                failed_job_id=kwargs.get("failed_job_id"),
            )

        getattr(signals, name).connect(receiver, weak=False)
        connected.append((getattr(signals, name), receiver))

    def lost(sender: Any, job: Any = None, operation: Any = None, **kwargs: Any) -> None:
        error = kwargs.get("error")
        history.record(
            f"settle.{getattr(operation, 'value', operation)}.stale",
            _tag(job),
            attempt=getattr(job, "attempts", None),
            job_id=getattr(job, "id", None),
            error=type(error).__name__,
            error_operation=getattr(getattr(error, "operation", None), "value", None),
        )

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


class ReadyMiddleware(Middleware):
    """Writes a ``worker.ready`` event when the worker's run begins (its middleware start, the app's first)."""

    def start(self, queue: Any) -> None:
        history.record("worker.ready", None)


def record_ready() -> None:
    """Add ReadyMiddleware at the end of KINETIS_QUEUE["MIDDLEWARE"]: a ``worker.ready`` event, past the command's
    start-up checks, about to reserve. A scenario that must not freeze one worker while another is still starting
    (a frozen process can hold the default SQLite database's lock, and start-up reads it) waits for it."""
    from django.conf import settings

    from kinetis_queue import middleware

    setting = copy.deepcopy(settings.KINETIS_QUEUE)
    setting["MIDDLEWARE"] = [*middleware.middleware_paths(load=False), f"{__spec__.name}.ReadyMiddleware"]
    settings.KINETIS_QUEUE = setting
    middleware.forget()


def where(tb: TracebackType | None) -> str:
    """Which worker step an escaping exception came from: settle, record, pop or other. A settlement is one call
    (``ack``, ``release``, ``fail``) or, where the worker batches its acks, a flush of ``ack_many``."""
    names = [frame.name for frame in traceback.extract_tb(tb)]
    for step, markers in (
        ("record", ("record",)),
        ("settle", ("_settle", "ack", "release", "fail", "ack_many", "_ack_many")),
        ("pop", ("pop", "_sweep")),
    ):
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
    heartbeat = os.environ.get("KQ_HEARTBEAT")
    if heartbeat:
        setting = copy.deepcopy(settings.KINETIS_QUEUE)
        for entry in setting["CONNECTIONS"].values():
            if entry.get("BACKEND") == "rabbitmq":
                entry["HEARTBEAT"] = int(heartbeat)
        settings.KINETIS_QUEUE = setting
    hold = os.environ.get("KQ_PREFETCH_HOLD")
    if hold:
        from kinetis_queue.worker import dispatcher

        dispatcher.PREFETCH_HOLD = float(hold)  # type: ignore[misc]
    registry_interval = os.environ.get("KQ_REGISTRY_INTERVAL")
    if registry_interval:  # read by each write (the row's next one is due this long after)
        from kinetis_queue.observability import registry

        registry.INTERVAL = float(registry_interval)  # type: ignore[misc]
    if os.environ.get("KQ_NO_RENEWAL") == "1":
        from kinetis_queue.worker.heartbeat import Heartbeat

        Heartbeat.start = lambda self, job: None  # type: ignore[method-assign]
    level = os.environ.get("KQ_ISOLATION_LEVEL")
    if level:
        for entry in settings.KINETIS_QUEUE["CONNECTIONS"].values():
            if "DATABASE" in entry:
                settings.DATABASES[entry["DATABASE"]].setdefault("OPTIONS", {}).update(
                    isolation_options(settings.DATABASES[entry["DATABASE"]]["ENGINE"], level)
                )


def isolation_options(engine: str, level: str) -> dict[str, Any]:
    """``DATABASES[...]['OPTIONS']`` that run a connection at ``level`` ("read committed", "serializable").

    Django's ``isolation_level`` reaches transactions it opens (``atomic()``) only: psycopg sends it with
    BEGIN, so a statement in autocommit (the SQL backend's claim) runs at the session default. On
    PostgreSQL the session default is set too (``default_transaction_isolation``), as a DBA's server or
    role setting would, so that every statement of the connection runs at ``level``.
    """
    if "postgresql" in engine:
        from django.db.backends.postgresql.psycopg_any import IsolationLevel

        return {
            "isolation_level": IsolationLevel[level.upper().replace(" ", "_")],
            "options": "-c default_transaction_isolation=" + level.replace(" ", "\\ "),
        }
    if "sqlite" in engine:
        return {}
    return {"isolation_level": level}


def main(argv: list[str]) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    os.environ.setdefault("KQ_HISTORY_ROLE", "worker")
    import django

    django.setup()
    _apply_knobs()
    from django.core.management import call_command

    import tests.faults.jobs  # noqa: F401  the job classes, known before the first pop

    install_observers()
    record_ready()
    before = set(sys.modules)
    history.record("worker.start", None, argv=argv)
    try:
        call_command("queue_work", *argv)
    except BaseException as exc:
        # queue_work wraps an escaping error in CommandError: the step is where its root cause came from.
        chain = [exc]
        while chain[-1].__cause__ is not None:
            chain.append(chain[-1].__cause__)
        history.record(
            "worker.stop",
            None,
            error=type(exc).__name__,
            cause=[type(e).__name__ for e in chain[1:]],
            step=where(chain[-1].__traceback__),
        )
        raise
    history.record("worker.exit", None, new_modules=sorted(set(sys.modules) - before))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
