"""How the rows of the limits, outbox, schedules and unique-jobs tables name themselves (admin pages, shell, logs):
identity only, never an argument value (an outbox row's envelope holds the job's arguments)."""

from __future__ import annotations

from kinetis_queue.limits.models import LimitSlot
from kinetis_queue.models import OutboxRecord, UniqueLockRecord
from kinetis_queue.schedules.models import ScheduleTick

SECRET = "s3cr3t-VALUE"


def test_a_concurrency_slot_names_its_key_and_number() -> None:
    assert str(LimitSlot(slot_key="a" * 32, slot=3, holder="h" * 32, expires_at=1.0)) == f"{'a' * 32}#3"


def test_an_outbox_row_names_its_job_connection_and_queue_never_its_envelope() -> None:
    row = OutboxRecord(
        connection="redis", queue="mail", job_id="j-1", envelope=f'{{"args": {{"to": "{SECRET}"}}}}', pushed_at=1.0
    )
    assert str(row) == "job j-1 for redis/mail"


def test_a_schedule_tick_names_its_schedule_and_tick() -> None:
    assert str(ScheduleTick(schedule="nightly", tick=1_700_000_000, job_id="j-2", claimed_at=1.0)) == (
        "nightly at 1700000000"
    )


def test_a_unique_lock_names_its_key_and_holder() -> None:
    assert str(UniqueLockRecord(lock_key="b" * 32, job_id="j-3", until="settled", expires_at=1, claimed_at=1)) == (
        f"{'b' * 32} held by j-3"
    )
