"""``manage.py queue_resume QUEUE``: the connection's workers take a paused queue's jobs again."""

from __future__ import annotations

from kinetis_queue.management.commands.queue_pause import Command as PauseCommand


class Command(PauseCommand):
    help = (
        "Resume a paused queue: every worker of the connection takes its jobs again within about a second. "
        "Idempotent: resuming a queue that is not paused changes nothing."
    )
    resuming = True
