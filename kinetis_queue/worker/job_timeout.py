"""The hard limit on one attempt's ``handle()`` (``Worker(job_timeout=...)``, ``queue_work --timeout``).

On POSIX, in the main thread, SIGALRM interrupts the running handle(); elsewhere the limit is
checked after handle() returns. Either way an attempt that ran too long fails with JobTimeoutError.
"""

from __future__ import annotations

import signal
import threading
import time
from types import FrameType
from typing import Any, Final

from kinetis_queue.exceptions import JobTimeoutError, JobTimeoutInterrupt
from kinetis_queue.job import JobContext, call_handle
from kinetis_queue.payload.envelope import TIMEOUT_KEY as TIMEOUT_KEY  # its home: the stored form of a job

#: SIGALRM interrupts a running handle() for job_timeout (POSIX, main thread only).
CAN_INTERRUPT: Final = hasattr(signal, "setitimer") and hasattr(signal, "SIGALRM")


def attempt_timeout(metadata: dict[str, Any], worker_timeout: float | None) -> float | None:
    """The limit on one attempt of a job with this ``metadata``: its own (TIMEOUT_KEY, a positive finite
    number of seconds) where it has one, else the worker's (None: no limit). An invalid value is ignored."""
    seconds = metadata.get(TIMEOUT_KEY)
    if isinstance(seconds, (int, float)) and type(seconds) is not bool and 0 < seconds < float("inf"):
        return float(seconds)
    return worker_timeout


class _Alarm:
    """The SIGALRM handler of one call: raises the interrupt once, and only while the call runs."""

    def __init__(self) -> None:
        self.armed = False
        self.fired = False

    def on_alarm(self, signum: int, frame: FrameType | None) -> None:
        if self.armed:
            self.armed = False
            self.fired = True
            raise JobTimeoutInterrupt()


def call_with_timeout(instance: Any, context: JobContext, seconds: float) -> None:
    """call_handle() under a hard limit: SIGALRM raises JobTimeoutInterrupt inside handle().

    The interrupt lands between two Python bytecodes, so it stops Python code in a loop and
    any blocking call that returns to Python on a signal (sleeps, socket and database waits);
    a long C call that does not (a huge regex, some extension code) is interrupted only when it
    returns. Outside the main thread, or without SIGALRM, the limit is checked after handle()
    returns instead. Either way the attempt fails with JobTimeoutError.
    """
    if not CAN_INTERRUPT or threading.current_thread() is not threading.main_thread():
        began = time.monotonic()
        call_handle(instance, context)
        if time.monotonic() - began > seconds:
            raise JobTimeoutError(seconds)
        return
    alarm = _Alarm()
    previous = signal.signal(signal.SIGALRM, alarm.on_alarm)
    try:
        alarm.armed = True
        try:
            signal.setitimer(signal.ITIMER_REAL, seconds)
            call_handle(instance, context)
        finally:
            # The alarm is one-shot and the handler disarms itself before raising, so the
            # interrupt is raised at most once, and only inside this try.
            alarm.armed = False
            signal.setitimer(signal.ITIMER_REAL, 0)
    except JobTimeoutInterrupt:
        raise JobTimeoutError(seconds) from None
    finally:
        signal.signal(signal.SIGALRM, signal.SIG_DFL if previous is None else previous)
    if alarm.fired:
        # handle() caught the interrupt and returned anyway: the attempt still ran too long.
        raise JobTimeoutError(seconds)
