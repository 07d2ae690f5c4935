"""Argument types shared by the queue_* commands: each rejects a bad value before anything runs.

argparse reports a rejected value and exits with status 2 before the command's ``handle()`` is
called, so a bad argument never prints anything on stdout nor touches a backend or the database.
"""

from __future__ import annotations

import argparse
import math
from typing import NamedTuple

from kinetis_queue.exceptions import InvalidQueueArgumentError
from kinetis_queue.validation import (
    validate_connection_name,
    validate_job_id,
    validate_queue_list,
    validate_queue_name,
)
from kinetis_queue.worker.turns import parse_queues


def queue_list(value: str) -> tuple[str, ...]:
    """``--queue a,b``: every name valid, none repeated (the whole list, before any is used)."""
    try:
        return validate_queue_list([name.strip() for name in value.split(",")])
    except InvalidQueueArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class WeightedQueues(NamedTuple):
    """``queue_work --queue emails:4,reports:1`` or ``--queue emails=8,reports=2``: the queues in order, their
    weights ({}: strict order) and their concurrent slots in one process ({}: the worker's --concurrency shared)."""

    names: tuple[str, ...]
    weights: dict[str, int]
    slots: dict[str, int]


def weighted_queue_list(value: str) -> WeightedQueues:
    """``--queue a,b`` (strict order), ``--queue a:4,b:1`` (turns in that proportion) or ``--queue a=8,b=2`` (slots
    of their own): every name valid, none repeated, every weight and slot count in range (the whole list, before
    any is used)."""
    try:
        names, weights, slots = parse_queues([entry.strip() for entry in value.split(",")])
        return WeightedQueues(validate_queue_list(list(names)), weights, slots)
    except (InvalidQueueArgumentError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def queue_name(value: str) -> str:
    try:
        return validate_queue_name(value)
    except InvalidQueueArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def job_id(value: str) -> str:
    """A job id as push() returns it: 32 lowercase hex digits."""
    try:
        return validate_job_id(value)
    except InvalidQueueArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def connection_name(value: str) -> str:
    try:
        return validate_connection_name(value, "--connection")
    except InvalidQueueArgumentError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def positive_number(value: str) -> float:
    """A finite number greater than 0 (seconds, megabytes, hours)."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a number") from None
    if not number > 0 or not math.isfinite(number):
        raise argparse.ArgumentTypeError("must be a positive number")
    return number


def positive_int(value: str) -> int:
    """An int of 1 or more, written in plain digits."""
    if not value.isascii() or not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError("must be a positive int")
    return int(value)


def record_id(value: str) -> int:
    """A failed-job record id: a positive int."""
    if not value.isascii() or not value.isdigit() or int(value) < 1 or int(value) > 2**63 - 1:
        raise argparse.ArgumentTypeError(f"{value[:40]!r} is not a failed-job id (a positive int)")
    return int(value)
