"""The table of rate limits in a Django database: one row per (rate key, slot), reused as starts age out."""

from __future__ import annotations

from django.db import models


class RateSlot(models.Model):
    """One counted start of a rate key (kinetis_queue.ratelimits.database).

    A sliding window of ``limit`` starts per ``per`` seconds keeps ``limit`` rows per key, each the time of one
    start: a new start takes a row whose time is ``per`` seconds old or more. A token bucket keeps one row (slot
    0) holding its theoretical arrival time (GCRA). Times are Unix seconds of the writing worker's clock.
    """

    #: 32 hex digits of the connection, the algorithm and the key (never the key as written).
    rate_key = models.CharField(max_length=32)
    slot = models.IntegerField()
    at = models.FloatField(default=0)

    class Meta:
        app_label = "kinetis_queue"
        db_table = "kinetis_queue_rate_slots"
        verbose_name = "rate limit slot"
        constraints = [models.UniqueConstraint(fields=["rate_key", "slot"], name="kinetis_queue_rate_slot_once")]

    def __str__(self) -> str:
        return f"{self.rate_key}#{self.slot}"
