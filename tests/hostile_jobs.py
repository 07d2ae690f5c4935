"""Jobs that misbehave in ways that must never stop a worker (issue 12: items 2, 5 and 6).

Module level, so a worker resolves them like any job. Each records the exception it raised in
RAISED, so a test can check that receivers get that very object.
"""

from __future__ import annotations

from typing import Annotated, Any

from kinetis_queue import Job, Sensitive

#: A Sensitive value no output may carry.
SECRET = "s3cr3t-HOSTILE-value"
#: The exceptions the jobs below raised, in order.
RAISED: list[BaseException] = []
#: Set by a test to make ExitsWhenRebuilt.__init__ raise SystemExit on the worker's reconstruction.
REBUILD_EXITS: list[bool] = []


class CustomBase(BaseException):
    """A BaseException that is neither the worker's shutdown nor its timeout."""


def _raise(exc: BaseException) -> None:
    RAISED.append(exc)
    raise exc


class RaisesBase(Job):
    """handle() raises the BaseException named by ``kind``."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def handle(self) -> None:
        if self.kind == "SystemExit":
            _raise(SystemExit(3))
        if self.kind == "KeyboardInterrupt":
            _raise(KeyboardInterrupt())
        if self.kind == "GeneratorExit":
            _raise(GeneratorExit())
        _raise(CustomBase("a job's own BaseException"))


class ExitsWhenRebuilt(Job):
    """Constructs at push; raises SystemExit when the worker rebuilds it while REBUILD_EXITS is set."""

    def __init__(self, label: str) -> None:
        if REBUILD_EXITS:
            raise SystemExit("refusing to be rebuilt")
        self.label = label

    def handle(self) -> None:
        pass


class Guarded(Job):
    """A plain and a Sensitive argument; ``outcome`` says what handle() does: "succeed" or "fail".

    A failure quotes the Sensitive value in its own message (the job's exception is its own business;
    nothing the worker adds may carry the value).
    """

    def __init__(self, label: str, token: Annotated[str, Sensitive], outcome: str = "succeed") -> None:
        self.label = label
        self.token = token
        self.outcome = outcome

    def handle(self) -> None:
        if self.outcome == "fail":
            _raise(RuntimeError(f"could not use {self.token}"))


class UnprintableError(Exception):
    """An exception whose str() raises."""

    def __str__(self) -> str:
        raise ValueError("no message for you")


class HostileText(Job):
    """handle() raises an exception whose text no database stores as is, per ``kind``."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def handle(self) -> None:
        messages: dict[str, Any] = {
            "nul": "a NUL \x00 in the message",
            "surrogate": "a lone surrogate \ud800 in the message",
            "controls": "escape \x1b[31m and bell \x07",
            "huge": "x" * 200_000,
        }
        if self.kind == "unprintable":
            _raise(UnprintableError())
        _raise(RuntimeError(messages[self.kind]))


class Echo(Job):
    """Succeeds: the target of the stored-field fuzz (any label)."""

    def __init__(self, label: Any = None) -> None:
        self.label = label

    def handle(self) -> None:
        pass
