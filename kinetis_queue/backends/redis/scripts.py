"""The Lua scripts, one ``.lua`` file per operation beside this module, read once at import.

Each script is sent by its SHA1 (``EVALSHA``); the server loads it on first use (or after a restart
or ``SCRIPT FLUSH``), when it answers ``NOSCRIPT`` (see client.RedisClient.script).
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


def _load(name: str) -> Script:
    text = resources.files(__package__).joinpath(f"{name}.lua").read_text(encoding="utf-8")
    return Script(name, text, hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).hexdigest())


PUSH_MANY = _load("push_many")
SWEEP = _load("sweep")
ACK_MANY = _load("ack_many")
UNRESERVE = _load("unreserve")
RECLAIM = _load("reclaim")
RELEASE = _load("release")
RENEW = _load("renew")
SIZE = _load("size")
STATS = _load("stats")
CLEAR = _load("clear")
PUSH_UNIQUE = _load("push_unique")
RELEASE_UNIQUE = _load("release_unique")
ACQUIRE_SLOT = _load("acquire_slot")
RENEW_SLOT = _load("renew_slot")
RELAY_PUSH = _load("relay_push")
