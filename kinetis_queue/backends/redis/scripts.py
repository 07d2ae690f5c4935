"""The Lua scripts, one ``.lua`` file per operation beside this module, read once at import.

Each script is sent by its SHA1 (``EVALSHA``); the server loads it on first use (or after a restart
or ``SCRIPT FLUSH``), when it answers ``NOSCRIPT`` (see client.RedisClient.script). A script that
stores a job starts with priority.lua's shared functions (job priority, kinetis_queue.priority); one that
pushes a unique job, with unique_push.lua's after them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True, slots=True)
class Script:
    """A Lua script and the SHA1 ``EVALSHA`` names it by."""

    name: str
    text: str
    sha: str


def _read(name: str) -> str:
    return resources.files(__package__).joinpath(f"{name}.lua").read_text(encoding="utf-8")


def storing(name: str, text: str, *, unique: bool = False) -> Script:
    """A script that stores jobs: priority.lua's functions, then unique_push.lua's (``unique``), then ``text``
    (also the schedules' fire.lua, which pushes as push() does)."""
    return _script(name, _read("priority") + (_read("unique_push") if unique else "") + text)


def _script(name: str, text: str) -> Script:
    return Script(name, text, hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).hexdigest())


def _load(name: str, *, prioritized: bool = False, unique: bool = False) -> Script:
    """``name``.lua, after the shared functions when it stores jobs (``prioritized``; ``unique``: a unique job)."""
    return storing(name, _read(name), unique=unique) if prioritized else _script(name, _read(name))


PUSH_MANY = _load("push_many", prioritized=True)
SWEEP = _load("sweep", prioritized=True)
ACK_MANY = _load("ack_many")
UNRESERVE = _load("unreserve", prioritized=True)
RECLAIM = _load("reclaim", prioritized=True)
RELEASE = _load("release", prioritized=True)
RENEW = _load("renew")
SIZE = _load("size")
STATS = _load("stats")
CLEAR = _load("clear")
PUSH_UNIQUE = _load("push_unique", prioritized=True, unique=True)
RELEASE_UNIQUE = _load("release_unique")
ACQUIRE_SLOT = _load("acquire_slot")
RENEW_SLOT = _load("renew_slot")
TAKE_RATE = _load("take_rate")
RELAY_PUSH = _load("relay_push", prioritized=True)
