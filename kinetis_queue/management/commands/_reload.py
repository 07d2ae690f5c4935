"""``queue_work --reload``: restart the worker when project code changes (docs/development.md).

Django's autoreloader does the watching, as for ``runserver``: the same reloader (StatReloader, or
Watchman when pywatchman is installed), the same files (every imported module, plus what receivers
of ``autoreload_started`` add), the same child command line and ``RUN_MAIN`` marker, the same exit
status 3 meaning "start me again". The layout differs from ``run_with_reloader`` on purpose, because
a worker holds deliveries:

- the worker keeps the child's main thread (its SIGTERM/SIGINT stop and its SIGALRM ``--timeout``
  need it) and the reloader runs in a thread; ``run_with_reloader`` puts the main function in a
  daemon thread and ends it by ``sys.exit(3)`` in the middle of whatever it was doing;
- a change stops the worker the way SIGTERM does: the running job finishes and is settled, then
  the child exits 3 and the parent starts a fresh one (``file_changed`` receivers that return True
  are how Django lets a receiver take over the reload);
- the parent forwards SIGTERM/SIGINT to the child once and waits for it, where
  ``restart_with_reloader`` would leave it to ``subprocess.run``, which kills the child outright.
  The child runs in a process group of its own, so a terminal's Ctrl-C reaches it once (forwarded).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from django.utils import autoreload

#: The exit status that asks the parent for a fresh child (Django's own).
RESTART = 3


def in_child() -> bool:
    """Whether this process is the reloading child (Django's RUN_MAIN marker), not the parent."""
    return os.environ.get(autoreload.DJANGO_AUTORELOAD_ENV) == "true"


def run_parent(say: Callable[[str], None]) -> int:
    """Start the child (this command line, RUN_MAIN set) again each time it exits RESTART; return its
    last status. SIGTERM and SIGINT are passed on to the child, and the loop ends with it."""
    environ = {**os.environ, autoreload.DJANGO_AUTORELOAD_ENV: "true", "PYTHONUNBUFFERED": "1"}
    arguments = autoreload.get_child_arguments()
    stopping = threading.Event()
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, frame: FrameType | None) -> None:
        stopping.set()
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    previous = {signum: signal.signal(signum, forward) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        while True:
            child = subprocess.Popen(  # noqa: S603  (our own command line, repeated, as Django's reloader does)
                arguments, env=environ, close_fds=False, process_group=0
            )
            status = child.wait()
            if status != RESTART or stopping.is_set():
                return status
            say("Code changed: starting the worker again.")
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


class Watcher:
    """Django's reloader in a thread of the child: on a change, ``on_change(path)`` (the worker stops
    after its running job) instead of Django's ``sys.exit``; ``changed`` says whether one came."""

    def __init__(self, on_change: Callable[[str], None]) -> None:
        self.reloader = autoreload.get_reloader()
        self.changed: str | None = None
        self.watching = threading.Event()
        self._on_change = on_change
        self._thread = threading.Thread(target=self._run, name="kinetis-queue-reloader", daemon=True)

    def start(self) -> None:
        autoreload.file_changed.connect(self._file_changed, dispatch_uid="kinetis_queue.reload")
        self._thread.start()

    def _file_changed(self, sender: Any, file_path: Any, **kwargs: Any) -> bool:
        if sender is not self.reloader:
            return False
        if self.changed is None:
            self.changed = str(file_path)
            self._on_change(str(file_path))
        return True  # handled: Django's reloader does not sys.exit this thread

    def _run(self) -> None:
        autoreload.autoreload_started.send(sender=self.reloader)  # apps may add files to watch, as for runserver
        ticker = self.reloader.tick()
        next(ticker)  # the first pass records every watched file: from here on a change is seen
        self.watching.set()
        while not self.reloader.should_stop:
            next(ticker)

    def stop(self) -> None:
        autoreload.file_changed.disconnect(dispatch_uid="kinetis_queue.reload")
        self.reloader.stop()
