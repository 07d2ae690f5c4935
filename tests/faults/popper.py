"""Competing poppers in one process: ``python -m tests.faults.popper CONNECTION QUEUE THREADS``.

Each thread pops and acks at once until a pop finds nothing, writing ``pop`` (tag, attempt),
``exec.start``/``exec.done`` (the job is a no-op, run as the ack's preamble) and ``settle.ack.ok``
events. ``KQ_VISIBILITY_TIMEOUT`` (set by the test) makes a legitimate reclaim impossible, so a tag
popped twice is a double reservation.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tests.faults import history

if TYPE_CHECKING:
    from kinetis_queue.contracts import Queue, QueuedJob


def take(queue: Queue, names: Sequence[str], timeout: float = 1.0) -> QueuedJob | None:
    """One pop and an immediate ack, recorded as pop, exec.start, exec.done and settle.ack.ok events."""
    job = queue.pop(timeout, names)
    if job is not None:
        tag = job.args.get("tag")
        history.record("pop", tag, attempt=job.attempts, thread=threading.get_ident())
        history.record("exec.start", tag, attempt=job.attempts)
        history.record("exec.done", tag, attempt=job.attempts)
        queue.ack(job)
        history.record("settle.ack.ok", tag, attempt=job.attempts)
    return job


def main(connection: str, queue_name: str, threads: int) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    os.environ.setdefault("KQ_HISTORY_ROLE", "popper")
    import django

    django.setup()
    from tests.faults.worker import _apply_knobs

    _apply_knobs()
    from kinetis_queue import connections

    queue = connections.build(connection)
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def pop_until_empty() -> None:
        barrier.wait()
        try:
            while take(queue, [queue_name]) is not None:
                pass
        except BaseException as exc:
            history.record("worker.stop", None, error=type(exc).__name__, step="pop-or-ack")
            errors.append(exc)

    workers = [threading.Thread(target=pop_until_empty) for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    dispose = getattr(queue, "dispose", None)
    if dispose is not None:
        dispose()
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
