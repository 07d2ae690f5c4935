"""Job priority within one queue: its range, its check, and where the envelope carries it (docs/priority.md).

A priority is an int from PRIORITY_MIN to PRIORITY_MAX (Django's Task.priority range); higher runs
first, equal priorities in push order. It travels in the envelope's metadata under METADATA_KEY, and
only when it is not 0: an envelope without priority is byte for byte what it was before priorities
existed, and a worker that predates them reads a prioritized envelope as an ordinary job.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kinetis_queue.exceptions import InvalidQueueArgumentError

#: The lowest and highest priority (django.tasks' TASK_MIN_PRIORITY and TASK_MAX_PRIORITY).
PRIORITY_MIN: Final = -100
PRIORITY_MAX: Final = 100
#: The priority of a job that names none; jobs at it take each store's usual (fastest) path.
DEFAULT_PRIORITY: Final = 0
#: The envelope's metadata key holding a priority other than DEFAULT_PRIORITY.
METADATA_KEY: Final = "kinetis_queue.priority"


def validate_priority(value: object, what: str = "priority") -> int:
    """``value`` as a priority, or InvalidQueueArgumentError naming ``what`` (never the value)."""
    if type(value) is not int or not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise InvalidQueueArgumentError(f"{what} must be an int from {PRIORITY_MIN} to {PRIORITY_MAX}")
    return value


def priority_of(metadata: Mapping[str, Any]) -> int:
    """The priority an envelope's metadata carries; DEFAULT_PRIORITY when it carries none or an invalid one.

    A stored value out of range is not a reason to drop the job (an older or foreign writer): it
    runs at the default priority instead.
    """
    value = metadata.get(METADATA_KEY, DEFAULT_PRIORITY) if metadata else DEFAULT_PRIORITY
    if type(value) is not int or not PRIORITY_MIN <= value <= PRIORITY_MAX:
        return DEFAULT_PRIORITY
    return value


def with_priority(metadata: dict[str, Any], priority: int) -> dict[str, Any]:
    """``metadata`` carrying ``priority`` (a copy; the same dict when the priority is the default)."""
    if priority == DEFAULT_PRIORITY:
        return metadata
    return {**metadata, METADATA_KEY: priority}
