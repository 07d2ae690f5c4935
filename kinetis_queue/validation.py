"""Argument checks shared by every backend, run before any I/O (contract: "What push() guarantees").

A violation raises InvalidQueueArgumentError. Messages may show the offending queue name, delay or
count (those are not job data), but never a job argument value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from datetime import timedelta
from typing import Final

from kinetis_queue.exceptions import InvalidQueueArgumentError

# -- limits shared by the core and every backend, each defined here once ---------------------------

#: The longest queue name: SQS's standard-queue rule, the narrowest of the four backends.
MAX_QUEUE_NAME: Final = 80
#: The queue-name grammar.
QUEUE_NAME = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_QUEUE_NAME}}}")
#: Largest attempt count or cap a backend stores (a 32-bit signed column's range).
MAX_COUNTER: Final = 2**31 - 1
#: The length of a job id: lowercase hex digits (a uuid4's).
JOB_ID_LENGTH: Final = 32
#: The retry delay's ceiling in seconds, the base delay's too (contract: "One transition per delivery").
MAX_RETRY_DELAY: Final = 900
#: Deepest container nesting accepted inside args or metadata (the argument contract's bound); a
#: top-level list holding scalars is level 1.
MAX_DEPTH: Final = 32
#: The connection-name grammar (contract: "Named connections").
CONNECTION_NAME = re.compile(r"[a-z][a-z0-9]*")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 90 else text[:87] + "..."


def validate_queue_name(name: object) -> str:
    """Return ``name`` if it is a valid queue name."""
    if type(name) is not str or QUEUE_NAME.fullmatch(name) is None:
        raise InvalidQueueArgumentError(
            f"queue name {_shown(name)} is invalid: use 1 to {MAX_QUEUE_NAME} letters, digits, '-' or '_'"
        )
    return name


def validate_queue_list(queues: object) -> tuple[str, ...]:
    """Validate a whole priority list before any of it is used: names valid, none repeated."""
    if isinstance(queues, (str, bytes)) or not isinstance(queues, Iterable):
        raise InvalidQueueArgumentError("queues must be a list of queue names, not a single string")
    names = tuple(queues)
    for name in names:
        validate_queue_name(name)
    if len(set(names)) != len(names):
        repeated = sorted({n for n in names if names.count(n) > 1})
        raise InvalidQueueArgumentError(f"queue list names {', '.join(repeated)} more than once")
    return names


def _seconds(value: object, what: str) -> float:
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif type(value) in (int, float):
        seconds = float(value)  # type: ignore[arg-type]
    else:
        raise InvalidQueueArgumentError(f"{what} must be a number of seconds or a timedelta")
    if not math.isfinite(seconds):
        raise InvalidQueueArgumentError(f"{what} must be a finite number of seconds")
    return seconds


def validate_delay(delay: object, what: str = "delay") -> float:
    """Return the delay in seconds: 0 (immediate) or positive; negative is rejected."""
    seconds = _seconds(delay, what)
    if seconds < 0:
        raise InvalidQueueArgumentError(f"{what} must be 0 or more seconds, got {_shown(delay)}")
    return seconds


def validate_max_attempts(max_attempts: object) -> int | None:
    """None defers to the worker's default; 0 or more is the cap itself."""
    if max_attempts is None:
        return None
    if type(max_attempts) is not int or not 0 <= max_attempts <= MAX_COUNTER:
        raise InvalidQueueArgumentError(
            f"max_attempts must be None or an int from 0 to {MAX_COUNTER}, got {_shown(max_attempts)}"
        )
    return max_attempts


def validate_timeout(timeout: object) -> float:
    """pop()'s timeout: 0 waits with no deadline, positive bounds the look, negative is rejected."""
    seconds = _seconds(timeout, "timeout")
    if seconds < 0:
        raise InvalidQueueArgumentError(f"timeout must be 0 (no deadline) or positive, got {_shown(timeout)}")
    return seconds


#: A job id: JOB_ID_LENGTH lowercase hex digits (re-exported as kinetis_queue.payload.envelope.JOB_ID).
JOB_ID = re.compile(rf"[0-9a-f]{{{JOB_ID_LENGTH}}}")


def validate_job_id(job_id: object) -> str:
    """Return ``job_id`` if it is a job id as push() returns it: 32 lowercase hex digits."""
    if type(job_id) is not str or JOB_ID.fullmatch(job_id) is None:
        raise InvalidQueueArgumentError(
            f"job id {_shown(job_id)} is invalid: a job id is {JOB_ID_LENGTH} lowercase hex digits, as push() returns"
        )
    return job_id


def validate_connection_name(name: object, key: str = "connection") -> str:
    """Return ``name`` if it follows ^[a-z][a-z0-9]*$."""
    if type(name) is not str or CONNECTION_NAME.fullmatch(name) is None:
        raise InvalidQueueArgumentError(
            f"{key} {_shown(name)} is invalid: a connection name is lowercase letters and digits, "
            "starting with a letter"
        )
    return name


def is_utf8(text: str) -> bool:
    """True when ``text`` encodes as UTF-8 (a lone surrogate does not); ASCII is checked cheaply first."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
