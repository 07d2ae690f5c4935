"""One recorded push from a process of its own (so libfaketime can skew its clock alone).

``python -m tests.faults.pusher CONNECTION QUEUE TAG DELAY`` pushes ``Tagged(TAG)`` with ``DELAY``
seconds and writes push.invoke/push.ok (or push.fail/push.info) into the history; it prints the
process's own ``time.time()`` at the push, which is what a skewed clock shifts.
"""

from __future__ import annotations

import os
import sys
import time


def main(connection: str, queue_name: str, tag: str, delay: float) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    os.environ.setdefault("KQ_HISTORY_ROLE", "pusher")
    import django

    django.setup()
    from kinetis_queue import connections
    from tests.faults.harness import push
    from tests.faults.jobs import Tagged

    queue = connections.build(connection)
    print(time.time(), flush=True)
    job_id = push(queue, Tagged(tag), queue_name, delay=delay)
    dispose = getattr(queue, "dispose", None)
    if dispose is not None:
        dispose()
    return 0 if job_id else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])))
