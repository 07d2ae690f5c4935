"""The stored envelope and the strict JSON it travels as (DESIGN.md §7).

Every durable backend stores id, pushedAt, class, args, attempts, maxAttempts and metadata. Writing
uses ``allow_nan=False``; reading rejects NaN/Infinity literals, duplicate keys, runaway nesting,
wrong shapes and out-of-range counters as MalformedQueuedJobDataError, so one corrupted message can
never raise something else that would stop a worker. A job's priority travels in its metadata
(kinetis_queue.priority), never as a key of its own: the set of keys is what it always was.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, NoReturn

from kinetis_queue.exceptions import MalformedJobSettledError, MalformedQueuedJobDataError
from kinetis_queue.job import MAX_CLASS_PATH, is_class_path
from kinetis_queue.priority import priority_of
from kinetis_queue.validation import JOB_ID as JOB_ID  # a stored job id: JOB_ID_LENGTH lowercase hex characters
from kinetis_queue.validation import JOB_ID_LENGTH, MAX_COUNTER, MAX_DEPTH, QUEUE_NAME, is_utf8


@dataclass(frozen=True, slots=True)
class Envelope:
    """A job as every durable backend stores it; ``attempts`` counts completed attempts."""

    id: str
    pushed_at: float
    job_class: str
    args: dict[str, Any]
    attempts: int
    max_attempts: int | None
    metadata: dict[str, Any]

    def to_json(self) -> str:
        """The envelope as one JSON object (the Redis member, for instance)."""
        return dumps(
            {
                "id": self.id,
                "pushedAt": self.pushed_at,
                "class": self.job_class,
                "args": self.args,
                "attempts": self.attempts,
                "maxAttempts": self.max_attempts,
                "metadata": self.metadata,
            }
        )

    def pushed_at_datetime(self) -> datetime:
        return datetime.fromtimestamp(self.pushed_at, UTC)

    @property
    def priority(self) -> int:
        """The job's priority within its queue, carried in ``metadata`` (kinetis_queue.priority); 0 by default."""
        return priority_of(self.metadata)


def new_envelope(job_class: str, args: dict[str, Any], max_attempts: int | None, metadata: dict[str, Any]) -> Envelope:
    """A fresh envelope: a random 32-hex id, pushed now, no attempts completed."""
    return Envelope(uuid.uuid4().hex, time.time(), job_class, args, 0, max_attempts, metadata)


def dumps(value: Any) -> str:
    """Compact JSON, ASCII-escaped, refusing NaN and infinities."""
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


def _malformed(what: str) -> NoReturn:
    raise MalformedQueuedJobDataError(f"stored job data is malformed: {what}")


def _reject_constant(name: str) -> NoReturn:
    _malformed(f"JSON literal {name} is not allowed")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        _malformed("a number is out of range")
    return number


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        _malformed("an object repeats a key")
    return result


_decoder = json.JSONDecoder(
    object_pairs_hook=_unique_object, parse_constant=_reject_constant, parse_float=_finite_float
)


def loads(text: str | bytes) -> Any:
    """Strict JSON: any deviation is MalformedQueuedJobDataError, never another exception."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        return _decoder.decode(text)
    except MalformedQueuedJobDataError:
        raise
    except (ValueError, RecursionError, TypeError, UnicodeDecodeError) as exc:
        raise MalformedQueuedJobDataError(f"stored job data is not valid JSON ({type(exc).__name__})") from None


def check_value_tree(value: Any, what: str) -> None:
    """Reject strings that are not valid UTF-8 and nesting deeper than MAX_DEPTH (+1 for the top map).

    ``value`` is a dict or a list. On every pop's path: scalars are checked in place and only
    containers go on the stack.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            _malformed(f"{what} is nested deeper than {MAX_DEPTH} levels")
        if type(item) is dict:
            for key in item:
                if not key.isascii() and not is_utf8(key):
                    _malformed(f"{what} holds a string that is not valid UTF-8")
            children = item.values()
        else:
            children = item
        for child in children:
            kind = type(child)
            if kind is str:
                if not child.isascii() and not is_utf8(child):
                    _malformed(f"{what} holds a string that is not valid UTF-8")
            elif kind is dict or kind is list:
                stack.append((child, depth + 1))


def expect(value: Any, check: Callable[[Any], bool], what: str) -> Any:
    if not check(value):
        _malformed(what)
    return value


def decode_args(args: Any) -> dict[str, Any]:
    expect(args, lambda v: type(v) is dict, "args is not an object")
    check_value_tree(args, "args")
    return args  # type: ignore[no-any-return]


def decode_metadata(metadata: Any) -> dict[str, Any]:
    expect(metadata, lambda v: type(v) is dict, "metadata is not an object")
    check_value_tree(metadata, "metadata")
    return metadata  # type: ignore[no-any-return]


def decode_fields(
    job_id: Any, pushed_at: Any, job_class: Any, args: Any, attempts: Any, max_attempts: Any, metadata: Any
) -> Envelope:
    """Check each stored part of a job and build its Envelope.

    On every pop's path, so the checks are written out rather than composed from expect().
    """
    if type(job_id) is not str or JOB_ID.fullmatch(job_id) is None:
        _malformed(f"id is not {JOB_ID_LENGTH} hex digits")
    kind = type(pushed_at)
    if (kind is not int and kind is not float) or not (0 <= pushed_at < 253402300800):  # NaN fails the range
        _malformed("pushedAt is out of range")
    if type(job_class) is not str or not is_class_path(job_class):
        _malformed(f"class is not a dotted path of Python identifiers of at most {MAX_CLASS_PATH} characters")
    if type(args) is not dict:
        _malformed("args is not an object")
    if args:
        for key in args:
            if not key.isidentifier():  # push() stores __init__ parameter names only
                _malformed("args has a key that is not a Python identifier")
        check_value_tree(args, "args")
    if type(attempts) is not int or not 0 <= attempts <= MAX_COUNTER:
        _malformed("attempts is out of range")
    if max_attempts is not None and (type(max_attempts) is not int or not 0 <= max_attempts <= MAX_COUNTER):
        _malformed("maxAttempts is out of range")
    if type(metadata) is not dict:
        _malformed("metadata is not an object")
    if metadata:
        check_value_tree(metadata, "metadata")
    return Envelope(job_id, float(pushed_at), job_class, args, attempts, max_attempts, metadata)


_KEYS = frozenset(("id", "pushedAt", "class", "args", "attempts", "maxAttempts", "metadata"))


# -- the message body of SQS and RabbitMQ ---------------------------------------------------------

#: The metadata key of a job's own retry rule, ``{"delay": seconds, "backoff": "exponential" | "fixed"}``
#: (written by the django.tasks backend from ``@task(retry_delay=..., backoff=...)``); absent: the worker's.
#: The worker reads it (worker/settlement.py); a retried failed job keeps it (failed.py).
RETRY_KEY: Final = "kinetis_queue.retry"
#: The metadata key of a job's own limit on one attempt, in seconds (written by the django.tasks backend
#: from ``@task(timeout=...)``); it replaces the worker's ``--timeout`` for that job (worker/job_timeout.py).
TIMEOUT_KEY: Final = "kinetis_queue.timeout"

#: The keys of an SQS or RabbitMQ message body; attempts, maxAttempts and metadata travel beside it.
BODY_KEYS = frozenset(("id", "pushedAt", "class", "args"))


def encode_body(envelope: Envelope) -> str:
    """The message body SQS and RabbitMQ store: id, pushedAt, class and args as one JSON object.

    attempts, maxAttempts and metadata travel beside the body, each broker in its own idiom (SQS
    message attributes, AMQP headers): SQS counts attempts itself, and a RabbitMQ release rewrites
    the count without touching the body.
    """
    return dumps(
        {"id": envelope.id, "pushedAt": envelope.pushed_at, "class": envelope.job_class, "args": envelope.args}
    )


def decode_body(body: str | bytes) -> dict[str, Any]:
    """A message body as ``encode_body()`` writes it: strict JSON with exactly its four keys, unchecked values."""
    data = loads(body)
    if type(data) is not dict or data.keys() != BODY_KEYS:
        _malformed("the message body does not have exactly the keys id, pushedAt, class, args")
    return data


def envelope_from_body(body: dict[str, Any], attempts: Any, max_attempts: Any, metadata: Any) -> Envelope:
    """The envelope of a ``decode_body()`` result and the parts read beside it, every one checked."""
    return decode_fields(body["id"], body["pushedAt"], body["class"], body["args"], attempts, max_attempts, metadata)


def decode_envelope(text: str | bytes) -> Envelope:
    """Decode one JSON envelope; every key is required and no other is allowed."""
    data = loads(text)
    if type(data) is not dict or data.keys() != _KEYS:
        _malformed(
            "the envelope does not have exactly the keys id, pushedAt, class, args, attempts, maxAttempts, metadata"
        )
    return decode_fields(
        data["id"],
        data["pushedAt"],
        data["class"],
        data["args"],
        data["attempts"],
        data["maxAttempts"],
        data["metadata"],
    )


def decode_queue_name(name: Any) -> str:
    """A stored queue name, checked against the grammar."""
    return expect(  # type: ignore[no-any-return]
        name, lambda v: type(v) is str and QUEUE_NAME.fullmatch(v) is not None, "queue name is invalid"
    )


def settle_if_malformed[T](decode: Callable[[], T], remove: Callable[[], None]) -> T:
    """Run ``decode``; on MalformedQueuedJobDataError remove the message and raise MalformedJobSettledError.

    Contract, "Malformed stored messages": only that error triggers removal. Any other exception
    from decoding propagates (a decoder defect), and a failing removal propagates as the transport
    failure it is.
    """
    try:
        return decode()
    except MalformedQueuedJobDataError as exc:
        remove()
        raise MalformedJobSettledError(f"a reserved message was malformed and has been removed: {exc}") from exc
