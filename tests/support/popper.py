"""Competing poppers for tests: ``python -m tests.support.popper CONNECTION QUEUE [THREADS]``.

THREADS threads (default 1) of one process each pop and ack at once until a pop finds nothing; the
process prints the ids it settled as one JSON list, so a test can check no job went to two poppers,
and exits 1 if a pop or an ack raised (its traceback on stderr).

Under a fault test (``KQ_HISTORY_DIR`` set, tests/faults/history.py) each step is recorded as the
events ``pop`` (tag, attempt), ``exec.start``/``exec.done`` (the job is a no-op, run as the ack's
preamble) and ``settle.ack.ok``, and the fault knobs apply (tests/faults/worker.py): there
``KQ_VISIBILITY_TIMEOUT`` makes a legitimate reclaim impossible, so a tag popped twice is a double
reservation. Without it the poppers hold their leases for a minute anyway: tests/settings.py's 1 s
visibility timeout would let a slow ack on a loaded machine expire into a legitimate redelivery.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tests.faults import history

if TYPE_CHECKING:
    from kinetis_queue.contracts import Queue, QueuedJob

#: The lease a popper holds when no fault test sets KQ_VISIBILITY_TIMEOUT.
HELD_FOR = 60


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


def main(connection: str, queue_name: str, threads: int = 1) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    os.environ.setdefault("KQ_HISTORY_ROLE", "popper")
    import django

    django.setup()
    from tests.faults.worker import _apply_knobs

    _apply_knobs()
    from kinetis_queue import connections

    queue = connections.build(connection)
    if "KQ_VISIBILITY_TIMEOUT" not in os.environ and hasattr(queue, "_visibility_timeout"):
        queue._visibility_timeout = HELD_FOR
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []
    settled: list[str] = []

    def pop_until_empty() -> None:
        barrier.wait()
        try:
            while (job := take(queue, [queue_name])) is not None:
                settled.append(job.id)
        except BaseException as exc:
            history.record("worker.stop", None, error=type(exc).__name__, step="pop-or-ack")
            traceback.print_exception(exc)
            errors.append(exc)

    workers = [threading.Thread(target=pop_until_empty) for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    dispose = getattr(queue, "dispose", None)
    if dispose is not None:
        dispose()
    print(json.dumps(settled))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 1))
