"""The history every fault test keeps (RELIABILITY.md §2.1): one JSON line per event, per process.

Each process appends to a file of its own, opened ``O_APPEND``, and writes each event with a single
``os.write`` (no Python buffering), so every line written before a SIGKILL or ``os._exit`` is on
disk. Events carry the job's ``tag`` (unique per test job), the pid, and two clocks: ``mono``
(CLOCK_MONOTONIC, shared by every process on the machine, so the checker can order events across
processes) and ``wall`` (informative; it is what libfaketime skews).

The directory comes from ``KQ_HISTORY_DIR``, which a test sets for itself and every subprocess.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path
from typing import Any

#: The environment variable naming the directory of the current test's history files.
ENV = "KQ_HISTORY_DIR"


#: Set for a process under libfaketime (tests/faults/procs.py): its skew, and the parent's monotonic
#: minus wall clock, so that its events land on the machine's real monotonic clock.
_SKEW = float(os.environ.get("KQ_FAKETIME_SKEW") or 0)
_MONO_MINUS_WALL = os.environ.get("KQ_MONO_MINUS_WALL")


def _mono() -> float:
    if _MONO_MINUS_WALL is None:
        return time.monotonic()
    return time.time() - _SKEW + float(_MONO_MINUS_WALL)


class History:
    """Appends events to ``<directory>/<role>-<pid>.jsonl``; safe to share between threads."""

    def __init__(self, directory: str | Path, role: str = "proc") -> None:
        self.directory = Path(directory)
        self.role = role
        self._fd: int | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def record(self, event: str, tag: str | None = None, **fields: Any) -> None:
        """Append one event as one line with one os.write."""
        line = json.dumps(
            {"e": event, "tag": tag, "pid": os.getpid(), "mono": _mono(), "wall": time.time(), **fields},
            separators=(",", ":"),
            default=str,
        )
        data = (line + "\n").encode()
        os.write(self._file(), data)

    def _file(self) -> int:
        pid = os.getpid()
        if self._fd is None or self._pid != pid:  # a forked child gets a file of its own
            with self._lock:
                if self._fd is None or self._pid != pid:
                    path = self.directory / f"{self.role}-{pid}-{uuid.uuid4().hex[:6]}.jsonl"
                    self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                    self._pid = pid
        return self._fd

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None


_current: History | None = None
_current_lock = threading.Lock()


def current() -> History | None:
    """This process's history, when ``KQ_HISTORY_DIR`` is set (jobs and worker hooks write here)."""
    global _current
    directory = os.environ.get(ENV)
    if not directory:
        return None
    with _current_lock:
        if _current is None or str(_current.directory) != directory:
            _current = History(directory, role=os.environ.get("KQ_HISTORY_ROLE", "proc"))
        return _current


def record(event: str, tag: str | None = None, **fields: Any) -> None:
    """Record into this process's history; a no-op outside a fault test."""
    history = current()
    if history is not None:
        history.record(event, tag, **fields)


def read(directory: str | Path) -> list[dict[str, Any]]:
    """Every event of every process, ordered by the shared monotonic clock.

    A line cut short (impossible with one small os.write, but cheap to tolerate) is skipped; a line not yet
    ended is read at a later call. The files only grow, so each call parses only what was appended since the
    last one (_parsed): a test that awaits an event reads the history ten times a second while workers write
    thousands of events, and parsing it whole each time cost a storm seconds of CPU. The events are shared
    between calls: read them, do not change them.
    """
    events: list[dict[str, Any]] = []
    with _PARSED_LOCK:
        for path in sorted(Path(directory).glob("*.jsonl")):
            events.extend(_parsed(path))
    events.sort(key=lambda e: e["mono"])
    return events


#: Per history file: its inode, the offset parsed up to (the end of its last whole line), and the events so far.
_PARSED: dict[Path, tuple[int, int, list[dict[str, Any]]]] = {}
_PARSED_FILES = 256
_PARSED_LOCK = threading.Lock()


def _parsed(path: Path) -> list[dict[str, Any]]:
    try:
        stat = path.stat()
    except FileNotFoundError:
        return []
    inode, offset, events = _PARSED.get(path, (stat.st_ino, 0, []))
    if inode != stat.st_ino or stat.st_size < offset:  # another file under the name: start again
        offset, events = 0, []
    if stat.st_size > offset:
        with path.open("rb") as handle:
            handle.seek(offset)
            data = handle.read()
        whole = data[: data.rfind(b"\n") + 1]
        for line in whole.decode("utf-8", errors="replace").splitlines():
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
        offset += len(whole)
    if path not in _PARSED and len(_PARSED) >= _PARSED_FILES:
        _PARSED.clear()
    _PARSED[path] = (stat.st_ino, offset, events)
    return events


def new_tag(run: str, seq: int) -> str:
    """A unique job tag: the run's id and a sequence number."""
    return f"{run}-{seq}"
