"""What a chain or a batch is made of, before it is dispatched (no Django here: ``kinetis_queue`` imports it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kinetis_queue.job import Job


@dataclass
class Chain:
    """A chain not dispatched yet: as a member of another workflow, it starts when that one reaches it."""

    members: Sequence[Job | Chain | Batch]


@dataclass
class Batch:
    """A batch not dispatched yet (see Chain); the callbacks are jobs run once when it ends."""

    members: Sequence[Job | Chain | Batch]
    on_success: Job | None = None
    on_failure: Job | None = None
    on_complete: Job | None = None
    #: on_failure at the first member that fails for good (True), or once every member settled.
    fail_fast: bool = True
