"""The delay ladder: 22 holding tiers per queue, dead-lettering down to the real queue.

Contract, "Backend mechanisms: RabbitMQ" (Delay ladder). AMQP 0-9-1 has no per-message delay and
RabbitMQ expires a queue's messages only from its head, so one holding queue with per-message
expiry would keep a short job waiting behind a long one. Each tier ``k`` instead is a durable
queue ``{queue}.delay.{2**k}s`` whose ``x-message-ttl`` is its own length, fed by the topic
exchange ``{queue}.delay.{2**k}s.in``. Every message in a tier owes exactly that tier's wait, so
nothing in it is held up by a message owing longer.

A delay of ``n`` whole seconds is spent as the binary sum of tiers. Its bits travel as the
routing key, 22 dot-separated words from bit 21 down to bit 0 (5 s is ``0. ... .0.1.0.1``). Tier
``k``'s exchange routes a key whose bit ``k`` is set into its holding queue and one whose bit is
clear straight to the next exchange down (an exchange-to-exchange binding; below tier 0, the real
queue itself). Each holding queue dead-letters into the next exchange down, and tier 0 into the
real queue through the default exchange. Dead-lettering keeps the routing key, so nothing polls
between hops. Every tier and exchange name contains a ``.``, which the queue-name grammar
forbids, so no application queue can collide with one.

With quorum queues (QUEUE_TYPE "quorum") the holding queues are quorum queues too, replicated like
the work queue, and dead-letter "at-least-once" (RabbitMQ 3.10 and later): the broker moves an
expired message on only once its target has it, where a classic queue's dead-lettering is at most
once. That strategy requires ``x-overflow: reject-publish``; the tiers have no length limit, so it
never refuses a publish.

This module holds the names, the routing-key maths and the declarations; it talks to the broker
only through the channel it is given.
"""

from __future__ import annotations

import math
from typing import Any, Final

import amqp

from kinetis_queue.exceptions import InvalidQueueArgumentError

#: Holding tiers per queue: 1 s, 2 s, 4 s ... 2,097,152 s.
TIERS: Final = 22
#: The top tier, whose x-message-ttl (2**21 s in ms) still fits a signed 32-bit field.
TOP_TIER: Final = TIERS - 1
#: The longest delay the ladder can hold: every tier once, 2**22 - 1 s (about 48 days).
MAX_DELAY: Final = 2**TIERS - 1


def whole_seconds(delay: float, what: str = "delay") -> int:
    """The delay in the ladder's unit, rounded up so it stays a floor; over MAX_DELAY is rejected.

    Called before any I/O (contract: "What push() guarantees": RabbitMQ's own ceiling).
    """
    seconds = math.ceil(delay)
    if seconds > MAX_DELAY:
        raise InvalidQueueArgumentError(
            f"{what} must be at most {MAX_DELAY} seconds on the rabbitmq backend (its delay ladder's ceiling)"
        )
    return seconds


def tier_seconds(tier: int) -> int:
    return 1 << tier


def holding_queue(queue: str, tier: int) -> str:
    """The durable queue where a message waits out tier ``tier``: ``{queue}.delay.{2**tier}s``."""
    return f"{queue}.delay.{tier_seconds(tier)}s"


def tier_exchange(queue: str, tier: int) -> str:
    """The topic exchange in front of tier ``tier``: ``{queue}.delay.{2**tier}s.in``."""
    return f"{holding_queue(queue, tier)}.in"


def entry_tier(seconds: int) -> int:
    """The tier a delay of ``seconds`` (>= 1) enters at: its highest set bit."""
    return seconds.bit_length() - 1


def routing_key(seconds: int) -> str:
    """The delay's bits as 22 dot-separated words, bit 21 first."""
    return ".".join("1" if seconds >> tier & 1 else "0" for tier in range(TOP_TIER, -1, -1))


def binding_pattern(tier: int, bit: str) -> str:
    """A topic pattern matching keys whose bit ``tier`` is ``bit`` ("0" or "1"), any other bit."""
    words = ["*"] * TIERS
    words[TOP_TIER - tier] = bit
    return ".".join(words)


#: What a quorum holding queue adds to its arguments (see the module's docstring).
QUORUM_HOLDING: Final = {
    "x-queue-type": "quorum",
    "x-dead-letter-strategy": "at-least-once",
    "x-overflow": "reject-publish",
}


def holding_arguments(queue: str, tier: int, quorum: bool = False) -> dict[str, Any]:
    """The holding queue's arguments: its TTL and where it dead-letters (the next exchange down)."""
    extra = QUORUM_HOLDING if quorum else {}
    if tier == 0:
        # The last hop: the default exchange routes by queue name, and the real queue's name
        # replaces the bits as the routing key.
        return {"x-message-ttl": 1000, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": queue, **extra}
    return {
        "x-message-ttl": tier_seconds(tier) * 1000,
        "x-dead-letter-exchange": tier_exchange(queue, tier - 1),
        **extra,
    }


def declare_tier(channel: Any, queue: str, tier: int, quorum: bool = False) -> None:
    """Declare tier ``tier`` of ``queue``'s ladder: its exchange, holding queue and both bindings.

    The tier below (or, for tier 0, the real queue) must exist already: it is this tier's
    dead-letter target and the destination of its bit-clear binding.
    """
    exchange = tier_exchange(queue, tier)
    holding = holding_queue(queue, tier)
    channel.exchange_declare(exchange, "topic", durable=True, auto_delete=False)
    channel.queue_declare(holding, durable=True, auto_delete=False, arguments=holding_arguments(queue, tier, quorum))
    channel.queue_bind(holding, exchange, binding_pattern(tier, "1"))
    if tier == 0:
        channel.queue_bind(queue, exchange, binding_pattern(0, "0"))
    else:
        channel.exchange_bind(tier_exchange(queue, tier - 1), exchange, binding_pattern(tier, "0"))


def existing_tier_counts(channel: Any, queue: str) -> list[int]:
    """The messages waiting in each tier of ``queue``'s ladder that exists, tier 0 first; declares nothing.

    Tiers are declared bottom up and deleted top down, so those that exist are 0 to some k: each is
    declared passively from tier 0 up until one is missing. The broker closes the channel over that
    one, so the caller gives this a channel of its own.
    """
    counts: list[int] = []
    try:
        for tier in range(TIERS):
            counts.append(int(channel.queue_declare(holding_queue(queue, tier), passive=True).message_count))
    except amqp.exceptions.NotFound:
        pass
    return counts


def purge_tier(channel: Any, queue: str, tier: int) -> int:
    """Purge tier ``tier``: the messages removed, or 0 if the tier is gone (deleted by another process since
    it was found). The broker closes the channel over a missing tier: give this a channel of its own."""
    try:
        return int(channel.queue_purge(holding_queue(queue, tier)))
    except amqp.exceptions.NotFound:
        return 0


def delete_ladder(channel: Any, queue: str) -> None:
    """Delete every tier's exchange and holding queue (with whatever they hold), top tier first."""
    for tier in range(TOP_TIER, -1, -1):
        channel.exchange_delete(tier_exchange(queue, tier))
        channel.queue_delete(holding_queue(queue, tier))
