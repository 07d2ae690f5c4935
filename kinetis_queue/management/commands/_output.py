"""The queue_* commands' base: whatever they write goes through printable() (kinetis_queue/payload/printable.py).

A job's name, a queue's task name or an exception's text may come from a payload; written raw, an
``ESC[2J`` in it would clear the operator's screen. Every command here subclasses QueueCommand, whose
stdout and stderr escape control characters (tab and newline kept) before the command's style is
applied, so a colour is written by ``self.stdout.write(text, style_func)``, never inside the text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO, cast

from django.core.management.base import BaseCommand, OutputWrapper

from kinetis_queue.payload.printable import printable


class PrintableOutput(OutputWrapper):
    """An OutputWrapper that escapes control characters in what it is given (not in its style)."""

    def write(  # type: ignore[override]  # OutputWrapper's own signature
        self, msg: str = "", style_func: Callable[[str], str] | None = None, ending: str | None = None
    ) -> None:
        super().write(printable(msg, lines=True), style_func, ending)


def _printable(wrapper: OutputWrapper) -> PrintableOutput:
    if isinstance(wrapper, PrintableOutput):
        return wrapper
    out = cast(TextIO, wrapper.__dict__["_out"])
    wrapped = PrintableOutput(out, wrapper.ending)
    wrapped.__dict__["_style_func"] = wrapper.__dict__["_style_func"]  # as set, not re-checked for a tty
    return wrapped


class QueueCommand(BaseCommand):
    """BaseCommand whose stdout and stderr are PrintableOutput, however Django (or call_command) sets them."""

    _stdout: PrintableOutput
    _stderr: PrintableOutput

    @property
    def stdout(self) -> PrintableOutput:
        return self._stdout

    @stdout.setter
    def stdout(self, wrapper: OutputWrapper) -> None:
        self._stdout = _printable(wrapper)

    @property
    def stderr(self) -> PrintableOutput:
        return self._stderr

    @stderr.setter
    def stderr(self, wrapper: OutputWrapper) -> None:
        self._stderr = _printable(wrapper)
