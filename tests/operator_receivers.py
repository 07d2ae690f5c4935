"""Signals with queued receivers, for tests/integrations/test_receivers.py (module level: a worker imports it)."""

from __future__ import annotations

from typing import Any

from django.dispatch import Signal

from kinetis_queue.contrib.receivers import queued_receiver

#: Queues the receivers below push to (the tests clear them first).
QUEUE = "queued-receivers"
FAILING_QUEUE = "queued-receivers-failing"
COMMIT_QUEUE = "queued-receivers-commit"

order_placed = Signal()
order_refunded = Signal()
order_cancelled = Signal()

#: Calls seen by the receivers in this process.
CALLS: list[tuple[str, Any, dict[str, Any]]] = []


@queued_receiver(order_placed, connection="sqlite", queue=QUEUE, max_attempts=2)
def send_receipt(sender: Any, **kwargs: Any) -> None:
    CALLS.append(("send_receipt", sender, kwargs))


@queued_receiver(order_refunded, connection="sqlite", queue=FAILING_QUEUE, max_attempts=1)
def refund_card(sender: Any, **kwargs: Any) -> None:
    CALLS.append(("refund_card", sender, kwargs))
    raise RuntimeError("the card processor said no")


@queued_receiver([order_cancelled], connection="sqlite", queue=COMMIT_QUEUE, on_commit=True)
def release_stock(sender: Any, **kwargs: Any) -> None:
    CALLS.append(("release_stock", sender, kwargs))


#: A receiver on a connection with an outbox (tests/integrations/test_outbox.py): pushed in the transaction.
OUTBOX_QUEUE = "queued-receivers-outbox"
order_shipped = Signal()


@queued_receiver(order_shipped, connection="redisoutbox", queue=OUTBOX_QUEUE)
def notify_carrier(sender: Any, **kwargs: Any) -> None:
    CALLS.append(("notify_carrier", sender, kwargs))
