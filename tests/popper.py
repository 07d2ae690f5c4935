"""A competing consumer for tests: ``python -m tests.popper CONNECTION QUEUE`` pops and acks until empty.

Prints the ids it settled as one JSON list, so a test can check no job went to two processes.
"""

from __future__ import annotations

import json
import os
import sys


def main(connection: str, queue: str) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from kinetis_queue import connections

    q = connections.build(connection)
    # The tests are about two pops at one instant. tests/settings.py's 1 s visibility timeout
    # would let a slow ack on a loaded machine expire into a legitimate redelivery, so the
    # poppers hold their leases for a minute.
    if hasattr(q, "_visibility_timeout"):
        q._visibility_timeout = 60
    ids = []
    while (job := q.pop(1.0, [queue])) is not None:
        q.ack(job)
        ids.append(job.id)
    print(json.dumps(ids))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
