"""The SQS backend's connection keys and SQS's own limits (``"BACKEND": "sqs"``); imports no boto3.

No credential keys: boto3's own chain supplies them, so secrets never sit in settings.
"""

from __future__ import annotations

from typing import Any, Final

from kinetis_queue.schema import BackendOptions, BuiltinBackend, KeyPath, Option, boolean, fail

#: ChangeMessageVisibility's and ReceiveMessage's VisibilityTimeout ceiling: 12 hours.
MAX_VISIBILITY_TIMEOUT: Final = 43200
#: SendMessage's DelaySeconds ceiling (contract: "Delayed jobs").
MAX_DELAY: Final = 900
#: SQS's own limit on a queue name, which QUEUE_PREFIX + the queue name must meet.
MAX_SQS_NAME: Final = 80
#: What FIFO adds to every SQS queue name: SQS requires it of a FIFO queue.
FIFO_SUFFIX: Final = ".fifo"
#: MESSAGE_GROUP's values on a FIFO connection: each message its own group (no order, no blocking: the
#: default), or one group per queue (push order; no receive gets the queue's jobs while one is in flight).
MESSAGE_GROUPS: Final = ("message", "queue")
#: What QUEUE_PREFIX may be: room is left for a queue name of at least one character.
QUEUE_PREFIX_RULE: Final = f"must be at most {MAX_SQS_NAME - 1} letters, digits, '-' or '_'"


def is_queue_prefix(value: Any) -> bool:
    """True for a QUEUE_PREFIX SQS can take: fewer than MAX_SQS_NAME ASCII letters, digits, '-' or '_'."""
    return (
        type(value) is str
        and len(value) < MAX_SQS_NAME
        and all(c.isascii() and (c.isalnum() or c in "-_") for c in value)
    )


def _default_or_text(value: Any, path: KeyPath) -> None:
    if value is not None and (type(value) is not str or not value):
        raise fail(path, "must be a non-empty string, or None for boto3's own default")


def _queue_prefix(value: Any, path: KeyPath) -> None:
    if not is_queue_prefix(value):
        raise fail(path, QUEUE_PREFIX_RULE)


def _message_group(value: Any, path: KeyPath) -> None:
    if type(value) is not str or value not in MESSAGE_GROUPS:
        raise fail(path, f"must be one of {', '.join(repr(name) for name in MESSAGE_GROUPS)}")


OPTIONS = BackendOptions(
    (
        Option("REGION", None, _default_or_text),
        Option("ENDPOINT_URL", None, _default_or_text),
        Option("QUEUE_PREFIX", "", _queue_prefix),
        Option("FIFO", False, boolean),
        Option("MESSAGE_GROUP", "message", _message_group),
    ),
    max_visibility_timeout=MAX_VISIBILITY_TIMEOUT,
)
#: This backend, as conf finds it (kinetis_queue.conf.builtin_backends).
BACKEND = BuiltinBackend("sqs", "kinetis_queue.backends.sqs.SqsQueue", OPTIONS, client="boto3", extra="sqs")
