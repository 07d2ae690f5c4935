"""The slot table of concurrency limits: one row per (key, slot number), reused as slots are taken and given back."""

from __future__ import annotations

from django.db import models


class LimitSlot(models.Model):
    """One of a concurrency key's slots (kinetis_queue.limits.database).

    A slot is free when its lease ended (``expires_at`` in the past; a given-back slot has 0). Rows are
    created on first use, one per slot number below the key's limit, and kept: taking a slot is an
    update of a free row, fenced by the holder's token like a lease.
    """

    #: 32 hex digits of the connection and the key (never the key as written).
    slot_key = models.CharField(max_length=32)
    slot = models.IntegerField()
    #: The holding delivery's random token; "" when free.
    holder = models.CharField(max_length=32, default="")
    #: Unix seconds (the worker's clock) when the lease ends unless renewed.
    expires_at = models.FloatField(default=0)

    class Meta:
        app_label = "kinetis_queue"
        db_table = "kinetis_queue_limit_slots"
        verbose_name = "concurrency slot"
        constraints = [models.UniqueConstraint(fields=["slot_key", "slot"], name="kinetis_queue_limit_slot_once")]

    def __str__(self) -> str:
        return f"{self.slot_key}#{self.slot}"
