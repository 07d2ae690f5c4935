"""Broker-wide RabbitMQ settings a test changes for its own duration, through ``rabbitmqctl`` (as the queue-length
policies of tests/specific/test_rabbitmq.py are set), and what a test reads of the broker on a connection of its
own (:func:`queue_exists`).

``max_message_size`` is the node's: RabbitMQ (3.10) reads it when a channel opens, and a channel keeps the value
it read. Lowering it is how a test makes the broker refuse a publish for good (406 PRECONDITION_FAILED, the
channel closed) without a 128 MiB message: a file lock keeps every such test of this machine (xdist workers,
other checkouts) from restoring the value under another one, and the value is restored afterwards. Channels
opened meanwhile by anything else keep the lowered limit; SMALL_MAX_MESSAGE_SIZE stays above every message the
other tests publish (1 MiB at most).
"""

from __future__ import annotations

import fcntl
import re
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import amqp
import pytest

#: The machine's broker (tests/settings.py RABBITMQ_URL).
BROKER = "127.0.0.1:5672"


def queue_exists(name: str, host: str = BROKER) -> bool:
    """Whether the broker has queue ``name``: a passive declare on a connection of this check's own."""
    connection = amqp.Connection(host=host)
    connection.connect()
    try:
        connection.channel().queue_declare(name, passive=True)
        return True
    except amqp.exceptions.NotFound:
        return False
    finally:
        connection.close()


#: The lowered max_message_size (bytes): a message body over it is refused by channels opened meanwhile.
SMALL_MAX_MESSAGE_SIZE = 2 * 1024 * 1024
LOCK_FILE = "/tmp/kinetis-queue-tests-rabbitmq-max-message-size.lock"


def _ctl(ctl: str, expression: str) -> str:
    done = subprocess.run([ctl, "-q", "eval", expression], capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        pytest.skip(f"rabbitmqctl eval failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout.strip()


@contextmanager
def small_max_message_size(limit: int = SMALL_MAX_MESSAGE_SIZE) -> Iterator[int]:
    """Lower the broker's max_message_size to ``limit`` while the block runs (skips without rabbitmqctl)."""
    ctl = shutil.which("rabbitmqctl")
    if ctl is None:
        pytest.skip("rabbitmqctl is not available to lower max_message_size")
    with open(LOCK_FILE, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            was = _ctl(
                ctl,
                "Was = application:get_env(rabbit, max_message_size), "
                f"ok = application:set_env(rabbit, max_message_size, {limit}), Was.",
            )
            found = re.fullmatch(r"\{ok,(\d+)\}", was)
            before = int(found.group(1)) if found else None
            try:
                yield limit
            finally:
                if before is None:
                    _ctl(ctl, "application:unset_env(rabbit, max_message_size).")
                else:
                    _ctl(ctl, f"application:set_env(rabbit, max_message_size, {before}).")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
