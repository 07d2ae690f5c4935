"""queue_prune also deletes what unique jobs and concurrency limits leave behind: expired lock rows and slot
rows free for a day, in the Django database and in each SQL connection's own database."""

from __future__ import annotations

import io
import time
import uuid

import pytest
from django.core.management import call_command

from kinetis_queue.limits.database import IDLE_FOR
from kinetis_queue.models import LimitSlot, UniqueLockRecord


def _lock(alias: str, expires_at: float) -> str:
    key = uuid.uuid4().hex
    UniqueLockRecord.objects.using(alias).create(
        lock_key=key, job_id=uuid.uuid4().hex, until="settled", expires_at=expires_at, claimed_at=time.time()
    )
    return key


def _slot(alias: str, holder: str, expires_at: float) -> str:
    key = uuid.uuid4().hex
    LimitSlot.objects.using(alias).create(slot_key=key, slot=0, holder=holder, expires_at=expires_at)
    return key


@pytest.mark.parametrize("alias", ["default", "postgres", "mariadb"])
def test_queue_prune_deletes_expired_locks_and_idle_slots_and_keeps_the_rest(alias: str) -> None:
    now = time.time()
    expired, live = _lock(alias, now - 1), _lock(alias, now + 600)
    idle = _slot(alias, "", now - IDLE_FOR - 60)
    recently_free = _slot(alias, "", now - 60)
    held = _slot(alias, "a" * 32, now - IDLE_FOR - 60)  # a holder's lease ended: the next taker reuses it

    out = io.StringIO()
    call_command("queue_prune", stdout=out)

    assert "expired unique-job lock(s)" in out.getvalue() and "idle concurrency slot(s)" in out.getvalue()
    locks = set(
        UniqueLockRecord.objects.using(alias).filter(lock_key__in=[expired, live]).values_list("lock_key", flat=True)
    )
    assert locks == {live}
    slots = set(
        LimitSlot.objects.using(alias)
        .filter(slot_key__in=[idle, recently_free, held])
        .values_list("slot_key", flat=True)
    )
    assert slots == {recently_free, held}
    LimitSlot.objects.using(alias).filter(slot_key__in=[recently_free, held]).delete()
    UniqueLockRecord.objects.using(alias).filter(lock_key=live).delete()
