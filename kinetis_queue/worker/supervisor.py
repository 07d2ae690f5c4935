"""``queue_work --processes N``: a parent process that runs N worker processes and looks after them.

- Each child is ``queue_work`` again with the same arguments (and ``--processes=1``), in a process
  group of its own, so a Ctrl-C in a terminal reaches the parent only and each child gets exactly
  the one signal the parent forwards (a second signal would make a child exit without settling).
- SIGTERM and SIGINT are forwarded to every child; the parent then waits for them and exits.
  A second signal is forwarded too: a child running a job then exits at once, unsettled.
- A child that dies unexpectedly (non-zero status, or killed) is started again, after a pause that
  doubles while it keeps dying young (1 s up to 60 s). A child that exits 0 stopped under control
  (a limit, the restart marker, an empty queue) and is not replaced: the parent exits once every
  child has stopped, and whatever supervises the parent (systemd, a container runtime) starts a
  new one with the new code.
- On Linux each child also asks the kernel for SIGTERM if the parent dies, so a SIGKILLed parent
  leaves no orphan workers behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Final

#: First pause before restarting a child that died; doubled while it keeps dying young.
RESTART_DELAY: Final = 1.0
MAX_RESTART_DELAY: Final = 60.0
#: A child that ran at least this long before dying restarts after RESTART_DELAY again.
HEALTHY_AFTER: Final = 30.0
#: How often the parent looks at its children.
POLL_INTERVAL: Final = 0.1


def child_command(argv: Sequence[str]) -> list[str]:
    """The command line of one child: this process's own ``queue_work`` command with ``--processes=1``.

    Raises ValueError when this process was not started from a command line naming queue_work
    (``call_command()`` has no command line to repeat).
    """
    if "queue_work" not in argv:
        raise ValueError("--processes needs a command line to repeat: run `manage.py queue_work --processes N`")
    index = list(argv).index("queue_work")
    head, rest = list(argv[:index]), list(argv[index + 1 :])
    if head and head[0].endswith(os.path.join("django", "__main__.py")):
        prefix = [sys.executable, "-m", "django"]  # started as `python -m django`
    else:
        prefix = [sys.executable, *head]
    # argparse keeps the last occurrence, so this overrides --processes however it was spelled.
    return [*prefix, "queue_work", *rest, "--processes=1"]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            pr_set_pdeathsig = 1
            libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
        except Exception:  # noqa: S110  (best effort: without it an orphan still stops on its own signal)
            pass


@dataclass
class _Slot:
    number: int
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    delay: float = RESTART_DELAY
    restart_at: float | None = None
    last_status: int | None = None


class Supervisor:
    """Runs ``processes`` copies of ``command`` until they have all stopped."""

    def __init__(self, command: Sequence[str], processes: int, *, say: Callable[[str], None]) -> None:
        self.command = list(command)
        self.slots = [_Slot(number) for number in range(1, processes + 1)]
        self.say = say
        self.stopping = False
        #: Signals forwarded to the children: a child ended by one of them stopped as asked.
        self.forwarded: set[int] = set()

    def run(self) -> int:
        """Start the children, supervise them, and return 0 when every child stopped cleanly."""
        previous = {signum: signal.signal(signum, self._forward) for signum in (signal.SIGTERM, signal.SIGINT)}
        try:
            for slot in self.slots:
                self._start(slot)
            while True:
                now = time.monotonic()
                for slot in self.slots:
                    self._look_after(slot, now)
                if all(slot.process is None and slot.restart_at is None for slot in self.slots):
                    break
                time.sleep(POLL_INTERVAL)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        # A child that got the forwarded signal before it could install its handlers (still starting)
        # ends by that signal: it had taken no job, so that is a clean stop too.
        clean = {0} | {-signum for signum in self.forwarded}
        return 0 if all(slot.last_status in clean for slot in self.slots) else 1

    def _start(self, slot: _Slot) -> None:
        slot.process = subprocess.Popen(  # noqa: S603  (our own command line, repeated)
            self.command, process_group=0, preexec_fn=_die_with_parent
        )
        slot.started = time.monotonic()
        slot.restart_at = None
        self.say(f"Supervisor: worker {slot.number} started (pid {slot.process.pid}).")

    def _look_after(self, slot: _Slot, now: float) -> None:
        if slot.process is not None:
            status = slot.process.poll()
            if status is None:
                return
            pid, slot.process, slot.last_status = slot.process.pid, None, status
            if status == 0 or self.stopping:
                self.say(f"Supervisor: worker {slot.number} (pid {pid}) stopped with status {status}.")
                return
            slot.delay = RESTART_DELAY if now - slot.started >= HEALTHY_AFTER else slot.delay
            slot.restart_at = now + slot.delay
            self.say(
                f"Supervisor: worker {slot.number} (pid {pid}) died with status {status}; "
                f"restarting it in {slot.delay:g}s."
            )
            slot.delay = min(slot.delay * 2, MAX_RESTART_DELAY)
            return
        if slot.restart_at is not None:
            if self.stopping:
                slot.restart_at = None
            elif now >= slot.restart_at:
                self._start(slot)

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        self.forwarded.add(signum)
        for slot in self.slots:
            if slot.process is not None and slot.process.poll() is None:
                slot.process.send_signal(signum)  # Popen itself ignores a child that exited meanwhile


def supervise(argv: Sequence[str], processes: int, say: Callable[[str], None]) -> int:
    """Run ``processes`` workers from this process's own command line; return the parent's exit status."""
    return Supervisor(child_command(argv), processes, say=say).run()
