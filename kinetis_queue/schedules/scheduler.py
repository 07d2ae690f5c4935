"""The Scheduler: pushes each due (schedule, tick) through its claim store; any number may run at once.

``fire_due(now)`` is what a loop calls (``queue_schedule``, or a worker's loop once it is wired
in): it pushes what is due and returns the seconds until it should be called again. A scheduler
keeps one cursor per schedule, the latest tick it dealt with; at its first call the cursor is the
latest tick the store knows (so a restart after downtime sees the missed ticks and applies the
catch-up policy) or, for a schedule never fired, the present (nothing before it fires).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from kinetis_queue.backends.sql import SqlQueue
from kinetis_queue.connections import queues
from kinetis_queue.contracts import Queue
from kinetis_queue.outbox import outbox_of
from kinetis_queue.schedules import declaration, ticks
from kinetis_queue.schedules.declaration import Schedule
from kinetis_queue.schedules.stores import (
    ClaimStore,
    DatabaseClaims,
    LastFired,
    RedisClaims,
    SqlClaims,
    tick_job_id,
)

logger = logging.getLogger("kinetis_queue.schedules")

#: fire_due() never asks to sleep longer than this (seconds): claims left by a dead scheduler are
#: completed, and a changed clock is noticed, within it.
MAX_WAIT: Final = 30.0
#: The pause before trying again a tick whose push raised (seconds).
RETRY_PAUSE: Final = 1.0
#: Default claim timeout of the Django-database claim store (seconds): a claim not marked pushed
#: after this long is taken over. Keep it well above a push's worst latency.
DEFAULT_CLAIM_TIMEOUT: Final = 300.0
#: How often (seconds) a scheduler prunes old claim rows.
PRUNE_EVERY: Final = 3600.0


@dataclass(frozen=True)
class ScheduleStatus:
    """One line of ``queue_schedule --list`` and the admin list."""

    name: str
    when: str
    job: str
    connection: str
    queue: str
    next_run: datetime
    last_run: datetime | None
    last_job_id: str | None
    #: Why the last run could not be read (the store is unreachable, its table missing), or None.
    error: str | None = None


class Scheduler:
    """Fires the declared schedules (or those given); thread-unsafe: one loop calls it."""

    def __init__(
        self,
        schedules: Sequence[Schedule] | None = None,
        *,
        claim_timeout: float = DEFAULT_CLAIM_TIMEOUT,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.schedules = list(declaration.load() if schedules is None else schedules)
        self.claim_timeout = claim_timeout
        self.clock = clock
        #: This scheduler's claim-owner token (DatabaseClaims).
        self.owner = uuid.uuid4().hex
        self._cursors: dict[str, float] = {}
        self._stores: dict[str, ClaimStore] = {}
        self._pruned_at = 0.0
        #: Job ids this scheduler pushed, with their (schedule, tick), newest last (tests and logs).
        self.pushed: list[tuple[str, int, str]] = []

    def queue(self, schedule: Schedule) -> Queue:
        return queues[schedule.connection]

    def store(self, schedule: Schedule) -> ClaimStore:
        """The claim store of a schedule's connection (one per connection)."""
        store = self._stores.get(schedule.connection)
        if store is None:
            store = self._stores[schedule.connection] = self._build_store(self.queue(schedule))
        return store

    def _build_store(self, queue: Queue) -> ClaimStore:

        if isinstance(queue, SqlQueue):
            return SqlClaims(queue.database)
        if queue.backend_name == "redis":
            from kinetis_queue.backends.redis import RedisQueue

            # On a Redis Cluster fire.lua's claim keys and the queue's key are in different slots: the
            # claim goes to the database, as for SQS (docs/backends/redis.md, "Redis Cluster"). With an
            # outbox, the connection's unique locks live in the outbox's database, which fire.lua cannot reach.
            if isinstance(queue, RedisQueue) and not queue.cluster and outbox_of(queue) is None:
                return RedisClaims(queue)
        return DatabaseClaims(owner=self.owner, claim_timeout=self.claim_timeout)

    def fire_due(self, now: float | None = None) -> float:
        """Push every due tick of every schedule (each once across all schedulers); return seconds to wait.

        A push that raises is logged and tried again on a later call (RETRY_PAUSE), still under the
        catch-up policy: a tick that stays unpushable past ticks.GRACE is then a missed tick.
        """
        now = self.clock() if now is None else now
        wait = MAX_WAIT
        for schedule in self.schedules:
            wait = min(wait, self._fire_schedule(schedule, now))
        wait = min(wait, self._recover(now))
        if now - self._pruned_at >= PRUNE_EVERY:
            self._prune(now)
        return max(0.0, wait)

    def _fire_schedule(self, schedule: Schedule, now: float) -> float:
        store = self.store(schedule)
        cursor = self._cursors.get(schedule.name)
        try:
            if cursor is None:
                last = store.last(schedule.name)
                cursor = now if last is None else float(last.tick)
            due = ticks.due(schedule, cursor, now)
            if due.skipped:
                logger.warning(
                    "Schedule %r: %d missed tick(s) not fired (catch-up policy %r).",
                    schedule.name,
                    due.skipped,
                    schedule.catch_up,
                )
            for tick in due.fire:
                job_id = store.fire(schedule, tick, self.queue(schedule), now)
                cursor = float(tick)
                if job_id is None:
                    continue
                if job_id != tick_job_id(schedule.name, tick):
                    logger.info(
                        "Schedule %r: tick %s not pushed: its unique key is held by job %s.",
                        schedule.name,
                        _shown(tick),
                        job_id,
                    )
                    continue
                self.pushed.append((schedule.name, tick, job_id))
                logger.info("Schedule %r: tick %s pushed as job %s.", schedule.name, _shown(tick), job_id)
        except Exception as exc:
            if cursor is not None:
                self._cursors[schedule.name] = cursor
            logger.error(
                "Schedule %r: could not push its due tick(s), trying again: %s: %s",
                schedule.name,
                type(exc).__name__,
                exc,
            )
            return RETRY_PAUSE
        self._cursors[schedule.name] = max(cursor, now)
        return ticks.next_tick(schedule, now) - now

    def _recover(self, now: float) -> float:
        by_store: dict[int, tuple[ClaimStore, dict[str, tuple[Schedule, Queue]]]] = {}
        for schedule in self.schedules:
            store = self.store(schedule)
            by_store.setdefault(id(store), (store, {}))[1][schedule.name] = (schedule, self.queue(schedule))
        wait = MAX_WAIT
        for store, members in by_store.values():
            try:
                store.recover(members, now)
            except Exception as exc:
                logger.error("Could not complete outstanding schedule claims: %s: %s", type(exc).__name__, exc)
                wait = RETRY_PAUSE
        return wait

    def _prune(self, now: float) -> None:
        self._pruned_at = now
        for schedule in self.schedules:
            try:
                self.store(schedule).prune(schedule.name, now)
            except Exception as exc:
                logger.warning("Schedule %r: could not prune old claims: %s", schedule.name, type(exc).__name__)

    def status(self, now: float | None = None) -> list[ScheduleStatus]:
        """Every schedule with its next run, last run and last job id (``queue_schedule --list``, the admin)."""
        now = self.clock() if now is None else now
        result = []
        for schedule in self.schedules:
            error = None
            try:
                last: LastFired | None = self.store(schedule).last(schedule.name)
            except Exception as exc:  # one unreachable store must not hide the other schedules
                last, error = None, f"{type(exc).__name__}: {exc}"
            result.append(
                ScheduleStatus(
                    name=schedule.name,
                    when=schedule.when,
                    job=schedule.job_path,
                    connection=schedule.connection,
                    queue=schedule.queue,
                    next_run=datetime.fromtimestamp(ticks.next_tick(schedule, now), schedule.timezone),
                    last_run=None if last is None else datetime.fromtimestamp(last.tick, schedule.timezone),
                    last_job_id=None if last is None else last.job_id,
                    error=error,
                )
            )
        return result


def _shown(tick: int) -> str:
    return datetime.fromtimestamp(tick, UTC).isoformat()
