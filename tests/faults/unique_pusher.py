"""Many pushes of one unique job from a process of its own (tests/faults/test_unique_jobs.py).

``python -m tests.faults.unique_pusher CONNECTION QUEUE TAG N`` pushes ``UniqueTagged(TAG)`` N times once the
file named by KQ_START exists (so every pusher starts together), and prints the distinct ids it got back, one
per line.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def main(connection: str, queue_name: str, tag: str, n: int) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from kinetis_queue import connections
    from tests.faults.jobs import UniqueTagged

    queue = connections.build(connection)
    start = Path(os.environ["KQ_START"])
    deadline = time.monotonic() + 60
    while not start.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    ids = {queue.push(UniqueTagged(tag), queue=queue_name) for _ in range(n)}
    print("\n".join(sorted(ids)), flush=True)
    dispose = getattr(queue, "dispose", None)
    if dispose is not None:
        dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
