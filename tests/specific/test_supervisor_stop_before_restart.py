"""A child that died is not started again once the supervisor is told to stop, and the exit is non-zero.

The race it pins: SIGTERM reaching the supervisor after a child died but before its restart pause is
over. The signal is sent from inside the supervisor's own report of the death (its ``say`` callback,
called by the supervising loop itself), so it lands in that window every time, whatever the machine's
load: the slot has no process to forward the signal to and a restart pending, which the stop cancels.
"""

from __future__ import annotations

import os
import signal
import sys

from kinetis_queue.worker.supervisor import Supervisor


def test_a_stop_during_the_restart_pause_cancels_the_restart() -> None:
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        if "died with status 3" in line:
            os.kill(os.getpid(), signal.SIGTERM)  # handled by the supervisor before its next look

    child = [sys.executable, "-c", "raise SystemExit(3)"]
    previous = signal.getsignal(signal.SIGTERM)

    status = Supervisor(child, 1, say=say).run()

    assert status == 1  # the child's death was not a clean stop
    assert signal.getsignal(signal.SIGTERM) == previous  # the supervisor put the handler back
    assert len(said) == 2, said
    assert said[0].startswith("Supervisor: worker 1 started (pid ")
    assert said[1].endswith("died with status 3; restarting it in 1s.")
    # No second "started" line: the pending restart was dropped when the stop came.
