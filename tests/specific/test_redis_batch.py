"""Redis backend, issue 14: the batch scripts (sweep.lua with a limit, ack_many.lua, push_many.lua,
unreserve.lua) and the wake-up (``_wait`` blocks in BLMOVE on the pending lists until one holds a job).

What the conformance suite (tests/conformance/test_batch.py) cannot see: the keys themselves, how
many round trips each operation costs, the order of a batch against successive pops, and that a
waiting pop is woken by the push rather than by the end of its pause. Every test runs on the
machine's Redis under a key prefix of its own, deleted afterwards.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from kinetis_queue.backends.redis import RedisQueue
from kinetis_queue.contracts import SWEEP_PAUSE, JobSettlement, PreparedPush, QueuedJob
from kinetis_queue.exceptions import InvalidQueueArgumentError, MalformedJobSettledError, StaleJobHandleError
from tests.jobs import Noop, Records
from tests.settings import REDIS_URL

MakeQueue = Callable[..., RedisQueue]


@pytest.fixture
def direct() -> Iterator[redis.Redis]:
    """A plain client on the machine's Redis, to look at the keys from outside the queue."""
    client = redis.Redis.from_url(REDIS_URL)
    yield client
    client.close()


@pytest.fixture
def make_queue(direct: redis.Redis) -> Iterator[MakeQueue]:
    """Build RedisQueues on a key prefix of the test's own; they are disposed and the keys deleted afterwards."""
    prefix = f"kinetis_test_{uuid.uuid4().hex[:12]}:"
    built: list[RedisQueue] = []

    def make(**kwargs: Any) -> RedisQueue:
        queue = RedisQueue(**{"url": REDIS_URL, "prefix": prefix, "visibility_timeout": 30, **kwargs})
        built.append(queue)
        return queue

    yield make
    for queue in built:
        queue.dispose()
    stale = list(direct.scan_iter(match=f"{prefix}*", count=1000))
    if stale:
        direct.delete(*stale)


@pytest.fixture
def queue(make_queue: MakeQueue) -> RedisQueue:
    return make_queue()


class Calls:
    """Every command the queue's client sends (scripts by name), recorded by wrapping the client."""

    def __init__(self, queue: RedisQueue, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[str] = []
        self.replies: list[tuple[str, Any]] = []
        client = queue._client
        execute, script, wait_any = client.execute, client.script, client.wait_any

        def spy_execute(*args: Any, **kwargs: Any) -> Any:
            self.sent.append(str(args[0]))
            reply = execute(*args, **kwargs)
            self.replies.append((str(args[0]), reply))
            return reply

        def spy_script(script: Any, keys: Any, args: Any, durable: bool = False) -> Any:
            self.sent.append(script.name)
            return script_real(script, keys, args, durable)

        def spy_wait_any(commands: Any, reply_within: float, what: str) -> Any:
            self.sent.append("+".join(str(command[0]) for command in commands))
            replies = wait_any(commands, reply_within, what)
            self.replies.append(("wait", replies))
            return replies

        script_real = script
        monkeypatch.setattr(client, "script", spy_script)
        monkeypatch.setattr(client, "wait_any", spy_wait_any)
        # client.script() runs its EVALSHA through execute(): only direct commands are recorded there.
        monkeypatch.setattr(client, "execute", spy_execute)

    def commands(self) -> list[str]:
        """Round trips, in order: scripts by name, other commands by name (EVALSHA itself left out)."""
        return [name for name in self.sent if name not in ("EVALSHA", "SCRIPT")]


def _hold(queue: RedisQueue, name: str, count: int) -> list[QueuedJob]:
    held: list[QueuedJob] = []
    while len(held) < count:
        reserved = queue.pop_many(5, [name], count - len(held))
        assert reserved.malformed == [] and reserved.jobs
        held += reserved.jobs
    return held


def _redis_time(direct: redis.Redis) -> float:
    seconds, micros = direct.time()
    return seconds + micros / 1_000_000


# -- sweep.lua with a limit (pop_many) ----------------------------------------------------------


def test_pop_many_reserves_in_push_order_in_one_script_call_each_with_its_own_lease(
    queue: RedisQueue, direct: redis.Redis, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One sweep.lua call reserves up to the limit, in the order successive pops would, each leased."""
    ids = [queue.push(Records(f"job-{i}"), queue=queue_name) for i in range(7)]
    calls = Calls(queue, monkeypatch)
    before = _redis_time(direct)

    reserved = queue.pop_many(5, [queue_name], 5)

    after = _redis_time(direct)
    assert calls.commands() == ["sweep"]
    assert [job.id for job in reserved.jobs] == ids[:5]
    assert all(job.attempts == 1 for job in reserved.jobs)
    leased = dict(direct.zrange(queue.keys(queue_name).leased, 0, -1, withscores=True))
    assert sorted(member.decode() for member in leased) == sorted(job.handle.member for job in reserved.jobs)
    assert all(before + 30 <= expiry <= after + 30 for expiry in leased.values())
    assert direct.llen(queue.keys(queue_name).pending) == 2
    rest = queue.pop_many(5, [queue_name], 5)
    assert [job.id for job in rest.jobs] == ids[5:]
    assert queue.ack_many(reserved.jobs + rest.jobs) == [None] * 7


def test_pop_many_reaches_a_lower_queue_only_when_the_higher_gave_fewer(
    queue: RedisQueue, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    high, low = f"{queue_name}-high", f"{queue_name}-low"
    queue.push_many([Records(f"high-{i}") for i in range(3)], queue=high)
    queue.push_many([Records(f"low-{i}") for i in range(3)], queue=low)
    calls = Calls(queue, monkeypatch)

    full = queue.pop_many(5, [high, low], 2)
    assert calls.commands() == ["sweep"]  # the high queue filled the batch: the low one was not swept
    short = queue.pop_many(5, [high, low], 3)
    assert calls.commands() == ["sweep", "sweep", "sweep"]

    assert [job.args["label"] for job in full.jobs + short.jobs] == ["high-0", "high-1", "high-2", "low-0", "low-1"]
    assert queue.ack_many(full.jobs + short.jobs) == [None] * 5


def test_a_malformed_member_in_a_batch_is_removed_and_reported_and_the_others_delivered(
    queue: RedisQueue, direct: redis.Redis, queue_name: str
) -> None:
    """Contract: Malformed stored messages, in a batch: reported in Reserved.malformed, not raised."""
    keys = queue.keys(queue_name)
    first = queue.push(Records("first"), queue=queue_name)
    direct.lpush(keys.pending, b"not json")  # reserved second
    last = queue.push(Records("last"), queue=queue_name)

    reserved = queue.pop_many(5, [queue_name], 5)

    assert [job.id for job in reserved.jobs] == [first, last]
    (error,) = reserved.malformed
    assert isinstance(error, MalformedJobSettledError) and "not json" not in str(error)
    assert direct.zscore(keys.leased, b"not json") is None
    assert direct.zcard(keys.leased) == 2 and direct.llen(keys.pending) == 0
    assert queue.ack_many(reserved.jobs) == [None, None]


def test_a_malformed_member_on_the_single_pop_path_still_raises(
    queue: RedisQueue, direct: redis.Redis, queue_name: str
) -> None:
    direct.rpush(queue.keys(queue_name).pending, b"not json")
    with pytest.raises(MalformedJobSettledError):
        queue.pop(5, [queue_name])
    assert direct.exists(*queue.keys(queue_name)) == 0


def test_expired_leases_come_next_in_a_batch_as_successive_pops_would_take_them(
    queue: RedisQueue, direct: redis.Redis, queue_name: str
) -> None:
    """A sweep that finds expired leases reserves one, reclaims them onto the tail, then reserves on."""
    keys = queue.keys(queue_name)
    waiting = [queue.push(Records(f"waiting-{i}"), queue=queue_name) for i in range(3)]
    crashed = {"id": uuid.uuid4().hex, "pushedAt": 1.5, "class": "tests.jobs.Noop", "args": {}}
    crashed.update(attempts=0, maxAttempts=None, metadata={})
    direct.zadd(keys.leased, {json.dumps(crashed, separators=(",", ":")): _redis_time(direct) - 60})

    reserved = queue.pop_many(5, [queue_name], 3)

    assert [(job.id, job.attempts) for job in reserved.jobs] == [(waiting[0], 1), (crashed["id"], 2), (waiting[1], 1)]
    assert direct.llen(keys.pending) == 1
    assert queue.ack_many(reserved.jobs) == [None] * 3


# -- ack_many.lua -------------------------------------------------------------------------------


def test_ack_many_is_one_script_call_across_queues_and_reports_each_refusal_in_place(
    queue: RedisQueue, direct: redis.Redis, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each ZREM fenced on its own envelope; a stale one (settled already) is reported, not raised."""
    one, two = f"{queue_name}-one", f"{queue_name}-two"
    queue.push_many([Noop(), Noop()], queue=one)
    queue.push_many([Noop(), Noop()], queue=two)
    held = _hold(queue, one, 2) + _hold(queue, two, 2)
    queue.ack(held[2])
    calls = Calls(queue, monkeypatch)

    results = queue.ack_many(held)

    assert calls.commands() == ["ack_many"]
    assert [type(result) for result in results] == [type(None), type(None), StaleJobHandleError, type(None)]
    stale = results[2]
    assert isinstance(stale, StaleJobHandleError) and stale.operation is JobSettlement.ACK
    assert direct.exists(*queue.keys(one), *queue.keys(two)) == 0


def test_ack_many_of_a_reclaimed_delivery_refuses_it_and_leaves_the_new_lease(
    make_queue: MakeQueue, direct: redis.Redis, queue_name: str
) -> None:
    queue = make_queue(visibility_timeout=1)
    queue.push(Noop(), queue=queue_name)
    (first,) = _hold(queue, queue_name, 1)
    (second,) = _hold(queue, queue_name, 1)  # waits for the lease to expire, then reclaims it
    assert second.attempts == 2

    (refused,) = queue.ack_many([first])

    assert isinstance(refused, StaleJobHandleError)
    assert direct.zscore(queue.keys(queue_name).leased, second.handle.member) is not None
    assert queue.ack_many([second]) == [None]


def test_ack_many_with_a_foreign_handle_is_refused_before_any_io(
    queue: RedisQueue, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue.push(Noop(), queue=queue_name)
    (held,) = _hold(queue, queue_name, 1)
    foreign = QueuedJob("0" * 32, queue_name, "tests.jobs.Noop", {}, 1, None, held.pushed_at, handle=("row", 1))
    calls = Calls(queue, monkeypatch)

    with pytest.raises(InvalidQueueArgumentError):
        queue.ack_many([held, foreign])

    assert calls.commands() == []
    assert queue.ack_many([held]) == [None]


# -- unreserve.lua ------------------------------------------------------------------------------


def test_unreserve_puts_the_same_envelope_on_the_pending_tail_and_drops_the_lease(
    queue: RedisQueue, direct: redis.Redis, queue_name: str
) -> None:
    """No attempt charged (the envelope byte for byte), and the next reserve takes it, ahead of the waiting jobs."""
    keys = queue.keys(queue_name)
    queue.push_many([Records("given-back"), Records("waiting")], queue=queue_name)
    (held,) = _hold(queue, queue_name, 1)

    queue.unreserve(held)

    assert direct.zcard(keys.leased) == 0
    assert direct.lindex(keys.pending, -1) == held.handle.member.encode()
    again = queue.pop_many(5, [queue_name], 1).jobs[0]
    assert (again.id, again.attempts, again.handle) == (held.id, 1, held.handle)
    assert queue.ack_many([again]) == [None]


def test_an_unreserve_of_a_reclaimed_delivery_is_refused_and_writes_nothing(
    make_queue: MakeQueue, direct: redis.Redis, queue_name: str
) -> None:
    queue = make_queue(visibility_timeout=1)
    queue.push(Noop(), queue=queue_name)
    (first,) = _hold(queue, queue_name, 1)
    (second,) = _hold(queue, queue_name, 1)
    keys = queue.keys(queue_name)
    before = {key: direct.dump(key) for key in keys}

    with pytest.raises(StaleJobHandleError) as refused:
        queue.unreserve(first)

    assert refused.value.operation is JobSettlement.UNRESERVE
    assert {key: direct.dump(key) for key in keys} == before
    queue.ack(second)


# -- push_many.lua ------------------------------------------------------------------------------


def test_push_many_to_one_queue_is_one_lpush_and_pops_in_the_order_given(
    queue: RedisQueue, direct: redis.Redis, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue.push(Records("already-waiting"), queue=queue_name)
    calls = Calls(queue, monkeypatch)

    ids = queue.push_many([Records(f"job-{i}") for i in range(50)], queue=queue_name)

    assert calls.commands() == ["LPUSH"]
    held = _hold(queue, queue_name, 51)
    assert [job.args["label"] for job in held[:1]] == ["already-waiting"]  # the batch goes behind it
    assert [job.id for job in held[1:]] == ids
    assert queue.ack_many(held) == [None] * 51


def test_a_delayed_batch_is_one_zadd_scored_by_each_due_time(
    queue: RedisQueue, direct: redis.Redis, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = Calls(queue, monkeypatch)
    batch = [queue.prepare(Records(f"later-{i}"), delay=60 + i, queue=queue_name) for i in range(3)]

    queue.send_many(batch)

    assert calls.commands() == ["ZADD"]
    stored = dict(direct.zrange(queue.keys(queue_name).delayed, 0, -1, withscores=True))
    assert stored == pytest.approx(
        {item.envelope.to_json().encode(): item.envelope.pushed_at + item.delay for item in batch}
    )
    assert direct.llen(queue.keys(queue_name).pending) == 0


def test_send_many_stores_each_push_where_its_queue_and_delay_say(
    queue: RedisQueue, direct: redis.Redis, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mixed batch is one push_many.lua call: immediate ones on their queue's pending list, delayed
    ones scored by their due time."""
    one, two = f"{queue_name}-one", f"{queue_name}-two"
    batch = [
        queue.prepare(Records("now-one"), queue=one),
        queue.prepare(Records("later-one"), delay=600, queue=one),
        queue.prepare(Records("now-two"), queue=two),
        queue.prepare(Records("later-two"), delay=60, queue=two),
    ]

    calls = Calls(queue, monkeypatch)
    queue.send_many(batch)

    assert calls.commands() == ["push_many"]
    for name, now, later in ((one, batch[0], batch[1]), (two, batch[2], batch[3])):
        keys = queue.keys(name)
        assert direct.lrange(keys.pending, 0, -1) == [now.envelope.to_json().encode()]
        ((member, score),) = direct.zrange(keys.delayed, 0, -1, withscores=True)
        assert member == later.envelope.to_json().encode()
        assert score == pytest.approx(later.envelope.pushed_at + later.delay)


def test_push_many_with_a_key_of_the_wrong_type_fails_at_it_and_keeps_what_came_before(
    queue: RedisQueue, direct: redis.Redis, queue_name: str
) -> None:
    """The atomicity fact: a script is never interleaved with another client's commands, but a runtime
    error part-way (here a delayed key someone made a string) keeps the writes before it. Redis has no
    rollback; only an out-of-memory refusal comes before the first write (test_redis_transport.py)."""
    keys = queue.keys(queue_name)
    direct.set(keys.delayed, "not a sorted set")
    batch = [queue.prepare(Noop(), queue=queue_name), queue.prepare(Noop(), delay=60, queue=queue_name)]

    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        queue.send_many(batch)

    assert direct.llen(keys.pending) == 1


def test_a_prepared_push_sent_alone_or_in_a_batch_is_stored_alike(
    queue: RedisQueue, direct: redis.Redis, queue_name: str
) -> None:
    envelope = queue.prepare(Records("same"), queue=queue_name).envelope
    queue.send(PreparedPush(envelope, 0, queue_name))
    queue.send_many([PreparedPush(envelope, 0, queue_name)])
    stored = direct.lrange(queue.keys(queue_name).pending, 0, -1)
    assert stored == [envelope.to_json().encode()] * 2


# -- the wake-up --------------------------------------------------------------------------------


def _blocked_pop(
    queue: RedisQueue, names: list[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[threading.Thread, threading.Event, list[Any], list[Any]]:
    """A thread in pop(); ``waiting`` is set once its sweep found nothing and it is about to block.

    ``waits`` records what each wait read: a job's envelope (BLMOVE found a pending list holding
    one), ``None`` when the block ran out, ``[]`` when no reply came at all.
    """
    waiting = threading.Event()
    waits: list[Any] = []
    delivered: list[Any] = []
    wait_any = queue._client.wait_any

    def spy(*args: Any, **kwargs: Any) -> Any:
        waiting.set()
        replies = wait_any(*args, **kwargs)
        waits.append(replies)
        return replies

    monkeypatch.setattr(queue._client, "wait_any", spy)
    thread = threading.Thread(target=lambda: delivered.append(queue.pop(30, names)))
    thread.start()
    return thread, waiting, waits, delivered


@pytest.mark.parametrize("watched", ["only", "second"])
def test_a_push_wakes_a_waiting_pop_before_its_pause_ends(
    make_queue: MakeQueue, direct: redis.Redis, queue_name: str, monkeypatch: pytest.MonkeyPatch, watched: str
) -> None:
    """The pop was blocked in BLMOVE and came back with the pushed envelope, not at the end of its pause;
    with two queues watched, the connection of the wait that did not answer is closed, not reused."""
    waiter, pusher = make_queue(), make_queue()
    other = f"{queue_name}-other"
    names = [queue_name] if watched == "only" else [other, queue_name]
    thread, waiting, waits, delivered = _blocked_pop(waiter, names, monkeypatch)
    assert waiting.wait(30)

    job_id = pusher.push(Noop(), queue=queue_name)
    thread.join(30)

    assert [job.id for job in delivered] == [job_id]
    assert delivered[0].handle.member.encode() in waits[-1]  # woken by the job itself
    waiter.ack(delivered[0])
    assert waiter.size(other) == 0 and waiter.size(queue_name) == 0  # each command reads its own reply
    assert direct.exists(*waiter.keys(queue_name), *waiter.keys(other)) == 0


@pytest.mark.parametrize("how", ["release", "unreserve", "push_many"])
def test_a_release_an_unreserve_and_a_batch_wake_a_waiting_pop_too(
    make_queue: MakeQueue, queue_name: str, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    waiter, other = make_queue(), make_queue()
    if how != "push_many":
        other.push(Noop(), queue=queue_name)
        (held,) = _hold(other, queue_name, 1)
    thread, waiting, waits, delivered = _blocked_pop(waiter, [queue_name], monkeypatch)
    assert waiting.wait(30)

    if how == "release":
        other.release(held)
    elif how == "unreserve":
        other.unreserve(held)
    else:
        other.push_many([Noop()], queue=queue_name)
    thread.join(30)

    assert len(delivered) == 1 and delivered[0] is not None
    assert any(reply is not None for reply in waits[-1])
    waiter.ack(delivered[0])


def test_the_wait_changes_nothing_it_finds(queue: RedisQueue, direct: redis.Redis, queue_name: str) -> None:
    """BLMOVE pending pending RIGHT RIGHT moves the tail to where it was: the list is the same, in order."""
    queue.push_many([Records(f"job-{i}") for i in range(3)], queue=queue_name)
    pending = queue.keys(queue_name).pending
    before = direct.lrange(pending, 0, -1)

    queue._wait((queue_name,), 0.5)

    assert direct.lrange(pending, 0, -1) == before


def test_the_wait_blocks_on_a_connection_of_its_own_with_a_reply_timeout_past_the_block(
    make_queue: MakeQueue, queue_name: str
) -> None:
    """A socket timeout shorter than the pause: the BLPOP's reply (None, at the end of the pause) is
    still read, not taken for a lost one, and other threads' commands are not held behind it."""
    queue = make_queue(socket_timeout=SWEEP_PAUSE / 4)
    outcome: list[Any] = []
    thread = threading.Thread(target=lambda: outcome.append(queue.pop(SWEEP_PAUSE * 1.5, [queue_name])))
    thread.start()
    for _ in range(5):  # while the other thread blocks (and after), this one's commands go through
        assert queue.size(queue_name) == 0
    thread.join(30)
    assert outcome == [None]


def test_a_wait_shorter_than_a_millisecond_never_blocks_for_ever(
    queue: RedisQueue, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis reads a BLPOP timeout that rounds to 0 ms as no timeout at all: such a wait is slept instead."""
    calls = Calls(queue, monkeypatch)
    queue._wait((queue_name,), 0.0004)
    assert calls.commands() == []
    queue._wait((queue_name,), 0.01)
    assert calls.commands() == ["BLMOVE"]
    assert calls.replies == [("wait", [None])]  # it timed out: nothing woke it
