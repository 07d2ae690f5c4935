"""Claim stores: where "this (schedule, tick) is pushed" is decided once, whatever the number of schedulers.

- ``SqlClaims`` (SQL connections): the ScheduleTick row is inserted in the transaction that pushes
  the job, in the connection's own database. The unique (schedule, tick) index makes a second
  insert fail (or wait for the first transaction, then fail). A scheduler killed before the commit
  leaves nothing: its transaction rolls back and the next scheduler's insert succeeds. Exactly once.
- ``RedisClaims`` (Redis connections without an outbox): fire.lua sets the claim key with ``SET NX EX``
  and pushes in the same script, as push() would (the job's priority, its unique lock). Exactly once while
  the claim key lives (CLAIM_TTL).
- ``DatabaseClaims`` (SQS, RabbitMQ, sync, custom backends, Redis Cluster, Redis with an outbox): the job
  store and the claim cannot share a transaction, so: insert the row (the claim), push, mark the row
  pushed. A scheduler killed between claim and push leaves a row without ``pushed_at``: once it is
  ``claim_timeout`` old, another scheduler takes it over (a conditional update) and pushes. The remaining
  duplicate window:
  a scheduler that pushed but did not mark (killed between the two, or stalled longer than
  ``claim_timeout`` between claiming and marking) gets its tick pushed a second time by the taker.
  Both pushes carry the same job id (``tick_job_id``), so the duplicate is recognisable. Closing
  that window would need the push in the claim's transaction (the outbox).

Every store pushes the tick's job as push() would: with the job class's priority, and through the
connection's unique lock, so a tick whose key is held stores nothing and its claim names the holder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any, Final

from django.db import IntegrityError, router, transaction

from kinetis_queue import crashpoints
from kinetis_queue.backends.redis.scripts import storing
from kinetis_queue.contracts import PreparedPush, Queue
from kinetis_queue.exceptions import ConnectionFailedError
from kinetis_queue.schedules.declaration import Schedule
from kinetis_queue.schedules.models import ScheduleTick
from kinetis_queue.unique import METADATA_KEY, lock_of

if TYPE_CHECKING:
    from kinetis_queue.backends.redis import RedisQueue

logger = logging.getLogger("kinetis_queue.schedules")

#: How long a Redis claim key lives, in seconds: far longer than any scheduler may still try that tick
#: (a tick is tried while it is on time, or as a catch-up after the latest fired tick).
CLAIM_TTL: Final = 7 * 86_400
#: Claim rows older than this (seconds) are pruned, except each schedule's latest.
RETENTION: Final = 7 * 86_400
#: Crash points (kinetis_queue/crashpoints.py) for the fault tests.
AFTER_CLAIM: Final = "schedule.claimed"
AFTER_PUSH: Final = "schedule.pushed"
#: Redis claims and pushes in one script, so it has no point between the two: this one is just before it.
BEFORE_SCRIPT: Final = "schedule.before_script"


def tick_job_id(schedule: str, tick: int) -> str:
    """The job id of (schedule, tick): 32 hex digits derived from both, the same on every host."""
    return hashlib.sha256(f"kinetis_queue.schedule\0{schedule}\0{tick}".encode()).hexdigest()[:32]


def prepared_push(schedule: Schedule, tick: int, queue: Queue) -> PreparedPush:
    """The schedule's job for ``tick``, checked and serialized as push() would (the job class's priority and
    unique lock included), under its tick's job id.

    A tick of a unique job whose key is held is deduplicated on every store: nothing is stored and the push
    gives the holder's id, never a DuplicateJobError (``unique_on_duplicate = "raise"`` is for callers of
    push(); a scheduler would only retry the tick)."""
    prepared = queue.prepare(schedule.build_job(), 0, schedule.queue)
    envelope = dataclasses.replace(prepared.envelope, id=tick_job_id(schedule.name, tick))
    prepared = dataclasses.replace(prepared, envelope=envelope)
    lock = lock_of(prepared)
    if lock is not None and lock.raise_duplicate:
        notes = {**prepared.notes, METADATA_KEY: dataclasses.replace(lock, raise_duplicate=False)}
        prepared = dataclasses.replace(prepared, notes=notes)
    return prepared


@dataclass(frozen=True)
class LastFired:
    """The latest tick a store knows for a schedule."""

    tick: int
    job_id: str
    #: When it was pushed (Unix seconds); None while a DatabaseClaims push is outstanding.
    fired_at: float | None


class ClaimStore(ABC):
    """Decides, once per (schedule, tick), which scheduler pushes it."""

    @abstractmethod
    def fire(self, schedule: Schedule, tick: int, queue: Queue, now: float) -> str | None:
        """Claim ``tick`` and push its job: the id the push gave when this call claimed it (the tick's job id,
        or the holder's when the job is unique and its key is held: then nothing was stored), None when it
        was claimed already. The claim records that id (``last()``)."""

    @abstractmethod
    def last(self, schedule: str) -> LastFired | None:
        """The latest tick claimed for ``schedule``, or None."""

    def recover(self, schedules: dict[str, tuple[Schedule, Queue]], now: float) -> list[str]:
        """Complete claims whose scheduler died before pushing (DatabaseClaims only); the job ids pushed."""
        return []

    def prune(self, schedule: str, now: float) -> None:  # noqa: B027 (an optional hook)
        """Forget old claims (the latest one is kept: it is the schedule's "last run")."""


class _RowClaims(ClaimStore):
    def __init__(self, alias: str) -> None:
        self.alias = alias

    def last(self, schedule: str) -> LastFired | None:
        row = ScheduleTick.objects.using(self.alias).filter(schedule=schedule).order_by("-tick").first()
        return None if row is None else LastFired(row.tick, row.job_id, row.pushed_at)

    def prune(self, schedule: str, now: float) -> None:
        rows = ScheduleTick.objects.using(self.alias).filter(schedule=schedule)
        latest = rows.order_by("-tick").values_list("tick", flat=True).first()
        if latest is not None:
            rows.filter(tick__lt=min(latest, now - RETENTION), pushed_at__isnull=False).delete()


class SqlClaims(_RowClaims):
    """Claim row and job row in one transaction of the SQL connection's database."""

    def fire(self, schedule: Schedule, tick: int, queue: Queue, now: float) -> str | None:
        prepared = prepared_push(schedule, tick, queue)
        with transaction.atomic(using=self.alias):
            try:
                with transaction.atomic(using=self.alias):  # a savepoint: the conflict leaves the outer block usable
                    ScheduleTick.objects.using(self.alias).create(
                        schedule=schedule.name,
                        tick=tick,
                        connection=schedule.connection,
                        job_id=prepared.id,
                        claimed_at=now,
                        pushed_at=now,
                        owner="",
                    )
            except IntegrityError:
                return None
            crashpoints.reach(AFTER_CLAIM)
            job_id = queue.send(prepared)
            if job_id != prepared.id:  # a unique job whose key is held: the claim names the holder
                ScheduleTick.objects.using(self.alias).filter(schedule=schedule.name, tick=tick).update(job_id=job_id)
        return job_id


class DatabaseClaims(_RowClaims):
    """Claim in the Django database, then push, then mark pushed (see the module docstring)."""

    def __init__(self, alias: str | None = None, *, owner: str, claim_timeout: float) -> None:
        super().__init__(alias or router.db_for_write(ScheduleTick))
        self.owner = owner
        self.claim_timeout = claim_timeout

    def fire(self, schedule: Schedule, tick: int, queue: Queue, now: float) -> str | None:
        prepared = prepared_push(schedule, tick, queue)
        try:
            with transaction.atomic(using=self.alias):
                row = ScheduleTick.objects.using(self.alias).create(
                    schedule=schedule.name,
                    tick=tick,
                    connection=schedule.connection,
                    job_id=prepared.id,
                    claimed_at=now,
                    pushed_at=None,
                    owner=self.owner,
                )
        except IntegrityError:
            return None
        return self._push_and_mark(row.pk, prepared, queue)

    def _push_and_mark(self, pk: Any, prepared: PreparedPush, queue: Queue) -> str:
        """Push a claim this scheduler holds, then mark it pushed (only if it still holds it)."""
        rows = ScheduleTick.objects.using(self.alias).filter(pk=pk, owner=self.owner, pushed_at__isnull=True)
        crashpoints.reach(AFTER_CLAIM)
        try:
            job_id = queue.send(prepared)
        except ConnectionFailedError:
            rows.delete()  # never sent: give the tick back at once rather than after the claim timeout
            raise
        crashpoints.reach(AFTER_PUSH)
        if not rows.update(pushed_at=time.time(), job_id=job_id):  # the holder's id when deduplicated
            logger.warning(
                "Scheduled job %s was pushed after its claim had been taken over: it may run twice (same job id).",
                prepared.id,
            )
        return job_id

    def recover(self, schedules: dict[str, tuple[Schedule, Queue]], now: float) -> list[str]:
        stale = ScheduleTick.objects.using(self.alias).filter(
            schedule__in=list(schedules), pushed_at__isnull=True, claimed_at__lt=now - self.claim_timeout
        )
        pushed: list[str] = []
        for row in list(stale[:100]):
            taken = (
                ScheduleTick.objects.using(self.alias)
                .filter(pk=row.pk, owner=row.owner, claimed_at=row.claimed_at, pushed_at__isnull=True)
                .update(owner=self.owner, claimed_at=now)
            )
            if not taken:
                continue  # another scheduler took it over first
            schedule, queue = schedules[row.schedule]
            logger.warning(
                "Schedule %r: the claim of tick %s was not completed by its scheduler within %gs; pushing it now.",
                row.schedule,
                row.tick,
                self.claim_timeout,
            )
            pushed.append(self._push_and_mark(row.pk, prepared_push(schedule, row.tick, queue), queue))
        return pushed


#: fire.lua: claims a tick and pushes its job as push() does (priority, unique lock), in one script.
FIRE_SCRIPT: Final = storing(
    "schedule fire", resources.files(__package__).joinpath("fire.lua").read_text(encoding="utf-8"), unique=True
)


class RedisClaims(ClaimStore):
    """Claim and push in one script on the connection's Redis server (fire.lua)."""

    def __init__(self, queue: RedisQueue) -> None:
        self.queue = queue

    def _state_key(self, schedule: str) -> str:
        return f"{self.queue.prefix}kinetis_queue:schedule:{schedule}"

    def fire(self, schedule: Schedule, tick: int, queue: Queue, now: float) -> str | None:
        prepared = prepared_push(schedule, tick, queue)
        state = self._state_key(schedule.name)
        target = self.queue.keys(schedule.queue)
        keys = [f"{state}:{tick}", state, target.pending, target.delayed, *self.queue.priority_keys(schedule.queue)]
        args: list[Any] = [prepared.id, CLAIM_TTL, prepared.envelope.to_json(), tick, repr(now)]
        args.append(prepared.envelope.priority)
        lock = lock_of(prepared)
        if lock is not None:  # pushed through its lock, as push_unique.lua pushes it
            locks = self.queue.lock_store()
            keys.append(locks.key(lock.key, schedule.queue))
            args += locks.lock_args(lock)
        crashpoints.reach(BEFORE_SCRIPT)
        done = self.queue._client.script(FIRE_SCRIPT, keys, args, True)  # durable: a push (WAIT_REPLICAS)
        return None if done == 0 else str(done.decode("ascii"))

    def last(self, schedule: str) -> LastFired | None:
        raw = self.queue._client.execute("HGETALL", self._state_key(schedule))
        if not raw:
            return None
        fields = {raw[i].decode(): raw[i + 1].decode() for i in range(0, len(raw), 2)}
        return LastFired(int(fields["tick"]), fields["job_id"], float(fields["fired_at"]))
