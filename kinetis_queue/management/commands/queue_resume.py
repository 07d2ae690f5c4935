"""``manage.py queue_resume QUEUE`` (or ``--all``): the connection's workers take a paused queue's jobs again
(every paused queue's, with ``--all``)."""

from __future__ import annotations

from kinetis_queue.management.commands.queue_pause import Command as PauseCommand


class Command(PauseCommand):
    help = (
        "Resume a paused queue: every worker of the connection takes its jobs again within about a second. "
        "--all removes every pause of the connection (queue_pause --all's and each queue's). "
        "Idempotent: resuming a queue that is not paused changes nothing."
    )
    resuming = True
