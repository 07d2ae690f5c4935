"""The transactional outbox: a push that commits with the business data, into any store (docs/outbox.md).

A Redis, SQS or RabbitMQ connection with ``OUTBOX`` (a database alias) has an ``Outbox``: a push made
inside a transaction on that database (or any push, with ``OUTBOX_ALWAYS``) writes the envelope to the
outbox table in that transaction instead of sending it. The relay (kinetis_queue.outbox.relay) then
moves committed rows to the store, at least once, deleting each only after the store confirmed it.

This module is the push side: what ``OutboxMiddleware`` asks of a connection's outbox. The table, the writer
and the relay are the Django glue around it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from kinetis_queue.middleware import Middleware, Store

if TYPE_CHECKING:
    from kinetis_queue.contracts import PreparedPush, Queue


class Outbox(ABC):
    """A connection's outbox, as ``OutboxMiddleware`` uses it."""

    #: The database alias whose transactions the outbox joins.
    database: str

    @abstractmethod
    def captures(self) -> bool:
        """Whether a push now goes to the outbox: inside a transaction on ``database``, or always."""

    @abstractmethod
    def write(self, queue: Queue, prepared: Sequence[PreparedPush]) -> None:
        """Write the pushes to the outbox table, in the current transaction on ``database``."""


#: The outbox's key in ``Queue.features``.
FEATURE_KEY = "outbox"


def attach(queue: Queue, outbox: Outbox | None) -> None:
    """Give ``queue`` its connection's outbox (connections.build_from() does, for OUTBOX); None takes it away."""
    if outbox is None:
        queue.features.pop(FEATURE_KEY, None)
    else:
        queue.features[FEATURE_KEY] = outbox


def outbox_of(queue: Queue) -> Outbox | None:
    """The outbox ``queue`` was built with (its connection's OUTBOX), or None."""
    outbox = queue.features.get(FEATURE_KEY)
    return None if outbox is None else cast(Outbox, outbox)  # attach() puts nothing else there; no ABC check per push


class OutboxMiddleware(Middleware):
    """The outbox on the push side (kinetis_queue.middleware): a push its connection's outbox captures is written
    to the outbox table in the current transaction; any other goes on to the store."""

    def send(self, queue: Queue, prepared: Sequence[PreparedPush], store: Store) -> list[str]:
        outbox = outbox_of(queue)
        if outbox is None or not outbox.captures():
            return store(prepared)
        outbox.write(queue, prepared)
        return [item.id for item in prepared]
