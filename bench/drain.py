"""The project's drain: one worker process running N no-op jobs, timed without Django's start-up.

``python -m django queue_work --stop-when-empty`` would time interpreter and Django start-up and
the final empty poll along with the jobs. This driver does what that command does (builds a fresh
queue for the connection with ``kinetis_queue.connections.build`` and a ``Worker`` with the
connection's MAX_ATTEMPTS and RETRY_BASE_DELAY), then times only the ``worker.process_next(0.5,
[queue])`` calls that process the N jobs: the pops, the per-job hygiene, ``handle()``, the
settlements and the signals. The first call opens the worker's connection, as in a real worker
(the bare loop's timing includes its connect too).

It also counts the database connections opened during the timed loop (Django's
``connection_created`` signal, sent by every DatabaseWrapper that connects): with the default
CONN_MAX_AGE = 0 the worker must still open one connection for the whole drain, not one per job.

Run as ``python -m bench.drain --connection C --queue Q --n N`` with DJANGO_SETTINGS_MODULE (or
the default ``bench.settings``); prints ``{"jobs": N, "seconds": s, "rate": N/s, "connects": c}`` as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any


def drain(connection: str, queue: str, n: int) -> tuple[float, int]:
    """Process ``n`` jobs with a Worker on ``connection``; return (seconds of the N calls, connects)."""
    from django.db.backends.signals import connection_created

    from kinetis_queue import conf, connections
    from kinetis_queue.contracts import DisposableQueue
    from kinetis_queue.worker import Worker

    settings = conf.connection_settings(connection)
    built = connections.build(settings.name)
    worker = Worker(
        built,
        connection=connection,
        default_max_attempts=settings.max_attempts,
        retry_base_delay=settings.retry_base_delay,
    )
    queues = [queue]
    connects: list[str] = []

    def count_connect(sender: Any, connection: Any, **kwargs: Any) -> None:
        connects.append(connection.alias)

    connection_created.connect(count_connect, weak=False)
    try:
        started = time.perf_counter()
        while worker.processed < n:
            if not worker.process_next(0.5, queues):
                raise SystemExit(f"drain: {queue!r} on {connection!r} ran dry after {worker.processed} jobs")
        return time.perf_counter() - started, len(connects)
    finally:
        connection_created.disconnect(count_connect)
        worker.close()
        if isinstance(built, DisposableQueue):
            built.dispose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.drain", description="Worker drain of N jobs.")
    parser.add_argument("--connection", required=True)
    parser.add_argument("--queue", required=True)
    parser.add_argument("--n", type=int, required=True)
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    django.setup()
    seconds, connects = drain(args.connection, args.queue, args.n)
    print(json.dumps({"jobs": args.n, "seconds": seconds, "rate": args.n / seconds, "connects": connects}))


if __name__ == "__main__":
    main()
