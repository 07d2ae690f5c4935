"""Weighted turns between a worker's queues (``queue_work --queue emails:4,reports:1``).

Without weights a worker asks its queues in the order given, so the first one with work always wins (strict
priority, the default). With weights, each reservation asks first the queue that is owed the most turns, then the
others in their order: a smooth weighted round robin, charged per job taken. Every job taken earns each queue its
weight and costs the queue it came from the sum of the weights (nginx's smooth weighted round robin), so while every
queue has work they are taken in proportion to their weights (4 emails for each report), spread out (E E R E E E E
R, not 16 emails then 4 reports); a queue with no work passes its turn to the next. What a queue is owed is
capped at one round's worth, so a queue idle for an hour does not then take a long run of turns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

#: The largest weight of one queue.
MAX_WEIGHT: Final = 100
#: The most concurrent slots of one queue (queue_work --queue emails=8).
MAX_SLOTS: Final = 256


class Turns:
    """The turn order of a worker's weighted queues; one per ``Worker.run()``, used by its reserving loop only."""

    def __init__(self, weights: Mapping[str, int]) -> None:
        self.weights = dict(weights)
        self.total = sum(self.weights.values())
        self.owed = dict.fromkeys(self.weights, 0)

    def order(self, queues: Sequence[str]) -> tuple[str, ...]:
        """``queues``, the one whose turn it is first (most owed once this turn's weights are added; ties keep the
        given order)."""
        owed, weights = self.owed, self.weights
        return tuple(sorted(queues, key=lambda name: -(owed.get(name, 0) + weights.get(name, 0))))

    def first_share(self, queues: Sequence[str]) -> int:
        """How many jobs one reservation may take when ``queues`` is in turn order: the first queue's weight, so a
        batch never takes more than its turn."""
        return self.weights.get(queues[0], 1) if queues else 1

    def charge(self, taken: Iterable[str]) -> None:
        """Count the jobs taken, by their queue: one turn each."""
        owed, total = self.owed, self.total
        for queue in taken:
            if queue not in owed:
                continue
            for name, weight in self.weights.items():
                owed[name] += weight
            owed[queue] -= total
            for name, value in owed.items():
                owed[name] = max(-total, min(total, value))


def parse_weights(entries: Sequence[str]) -> tuple[tuple[str, ...], dict[str, int]]:
    """``["emails:4", "reports:1"]`` -> the queue names in order and their weights ({} when none has one: strict
    order). A queue without a weight among weighted ones gets 1. Raises ValueError naming the entry and the rule."""
    names, weights, slots = parse_queues(entries)
    if slots:
        raise ValueError("slots (queue=N) are queue_work's: give weights only here")
    return names, weights


def parse_queues(entries: Sequence[str]) -> tuple[tuple[str, ...], dict[str, int], dict[str, int]]:
    """``["emails:4=8", "reports:1=2"]`` -> the queue names in order, their weights (``:W``; {} when none has one:
    strict order; 1 for a queue without one among weighted ones) and their concurrent slots in one process (``=N``;
    {} when none has them; every queue needs its own when one has). Raises ValueError naming the queue and the
    rule."""
    names: list[str] = []
    weights: dict[str, int] = {}
    slots: dict[str, int] = {}
    for entry in entries:
        head, has_slots, count = entry.partition("=")
        name, has_weight, weight = head.partition(":")
        names.append(name)
        if has_weight:
            if not weight.isdigit() or not 1 <= int(weight) <= MAX_WEIGHT:
                raise ValueError(f"the weight of queue {name!r} must be a whole number from 1 to {MAX_WEIGHT}")
            weights[name] = int(weight)
        if has_slots:
            if not count.isdigit() or not 1 <= int(count) <= MAX_SLOTS:
                raise ValueError(f"the slots of queue {name!r} must be a whole number from 1 to {MAX_SLOTS}")
            slots[name] = int(count)
    if weights:
        weights = {name: weights.get(name, 1) for name in names}
    if slots and len(slots) < len(names):
        missing = next(name for name in names if name not in slots)
        raise ValueError(f"queue {missing!r} has no slots: give every queue its slots (queue=N) or none")
    return tuple(names), weights, slots
