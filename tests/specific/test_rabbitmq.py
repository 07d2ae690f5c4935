"""The RabbitMQ backend beyond the conformance suite: the delay ladder, confirmed publishing, headers,
receipts of dropped connections, malformed messages and settings (contract: "Backend mechanisms: RabbitMQ").

Every test runs against the machine's broker with its own queue names, and deletes what it declared
(queues, ladder tiers, exchanges) when it ends.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import amqp
import pytest
from django.test import override_settings

from kinetis_queue import conf, connections
from kinetis_queue.backends.rabbitmq import RabbitMqQueue, ladder
from kinetis_queue.backends.rabbitmq import queue as rabbit_queue_module
from kinetis_queue.backends.rabbitmq import session as session_module
from kinetis_queue.backends.rabbitmq.session import parse_url
from kinetis_queue.contracts import JobSettlement, PreparedPush
from kinetis_queue.exceptions import (
    ConnectionFailedError,
    InvalidQueueArgumentError,
    JobTimeoutInterrupt,
    MalformedJobSettledError,
    PublishNotConfirmedError,
    QueueConfigurationError,
    StaleJobHandleError,
)
from tests.faults.faultproxy import Blackhole, FaultProxy, Mute, Pass
from tests.jobs import Noop, Records
from tests.settings import RABBITMQ_URL
from tests.support.helpers import exit_forked_child, wait_until
from tests.support.rabbitmq_broker import queue_exists, small_max_message_size

BROKER = "127.0.0.1:5672"


@pytest.fixture
def janitor(queue_name: str) -> Iterator[set[str]]:
    """Queue names to delete (with their ladders) when the test ends; the test's own name is in it."""
    names = {queue_name}
    yield names
    cleaner = RabbitMqQueue(url=RABBITMQ_URL)
    try:
        for name in names:
            cleaner.delete(name)
    finally:
        cleaner.dispose()


@pytest.fixture
def make_queue(janitor: set[str]) -> Iterator[Callable[..., RabbitMqQueue]]:
    """Build RabbitMqQueues (the ``rabbitmq`` test connection, or direct options); all are cleaned up."""
    built: list[RabbitMqQueue] = []

    def make(**options: Any) -> RabbitMqQueue:
        queue = RabbitMqQueue(**{"url": RABBITMQ_URL, **options}) if options else connections.build("rabbitmq")
        assert isinstance(queue, RabbitMqQueue)
        built.append(queue)
        return queue

    yield make
    for queue in built:
        janitor.update(queue.declared)
        queue.dispose()


@pytest.fixture
def rabbit(make_queue: Callable[..., RabbitMqQueue]) -> RabbitMqQueue:
    return make_queue()


@pytest.fixture
def raw() -> Iterator[Any]:
    """A plain py-amqp channel on the broker, to look at what the backend stored."""
    connection = amqp.Connection(host=BROKER)
    connection.connect()
    try:
        yield connection.channel()
    finally:
        connection.close()


def _drop_connection(queue: RabbitMqQueue) -> None:
    """Cut the queue's TCP connection under it, as a network failure would (the broker sees it close)."""
    session = queue._session
    assert session is not None
    session.connection.sock.shutdown(2)


# -- the ladder's names and maths --------------------------------------------------------------------


def test_tier_names_carry_their_length_and_a_dot() -> None:
    """Contract: Delay ladder ({queue}.delay.{seconds}s and a matching .in exchange; a '.' avoids collisions)."""
    assert ladder.TIERS == 22
    assert [ladder.holding_queue("jobs", tier) for tier in (0, 1, 2, 21)] == [
        "jobs.delay.1s",
        "jobs.delay.2s",
        "jobs.delay.4s",
        "jobs.delay.2097152s",
    ]
    assert ladder.tier_exchange("jobs", 11) == "jobs.delay.2048s.in"
    assert ladder.MAX_DELAY == 4_194_303
    assert ladder.holding_arguments("jobs", 21)["x-message-ttl"] == 2**21 * 1000 < 2**31
    assert ladder.holding_arguments("jobs", 3)["x-dead-letter-exchange"] == "jobs.delay.4s.in"
    assert ladder.holding_arguments("jobs", 0) == {
        "x-message-ttl": 1000,
        "x-dead-letter-exchange": "",
        "x-dead-letter-routing-key": "jobs",
    }


def _topic_matches(pattern: str, key: str) -> bool:
    """RabbitMQ's topic match for patterns made of words and '*' only (all the ladder uses)."""
    words, keys = pattern.split("."), key.split(".")
    return len(words) == len(keys) and all(w in ("*", k) for w, k in zip(words, keys, strict=True))


def _route(seconds: int) -> list[int]:
    """Follow a delayed message through the ladder's bindings: the tiers it waits in, top first."""
    waited = []
    tier = ladder.entry_tier(seconds)
    key = ladder.routing_key(seconds)
    while tier >= 0:
        into_holding = _topic_matches(ladder.binding_pattern(tier, "1"), key)
        onwards = _topic_matches(ladder.binding_pattern(tier, "0"), key)
        assert into_holding != onwards, f"tier {tier} must route key {key} one way only"
        if into_holding:
            waited.append(tier)
        tier -= 1  # the holding queue dead-letters, and the bit-clear binding leads, one exchange down
    return waited


@pytest.mark.parametrize("seconds", [1, 2, 3, 5, 7, 8, 3600, 86_400, 2**21, ladder.MAX_DELAY])
def test_a_delay_is_spent_as_the_binary_sum_of_its_tiers(seconds: int) -> None:
    """Contract: Delay ladder (3600 s is 2048 + 1024 + 512 + 16; the bits travel as the routing key)."""
    key = ladder.routing_key(seconds)

    waited = _route(seconds)

    assert len(key.split(".")) == ladder.TIERS
    assert int(key.replace(".", ""), 2) == seconds
    assert sum(ladder.tier_seconds(tier) for tier in waited) == seconds
    assert waited[0] == ladder.entry_tier(seconds)
    if seconds == 3600:
        assert [ladder.tier_seconds(tier) for tier in waited] == [2048, 1024, 512, 16]


@pytest.mark.parametrize(
    ("delay", "seconds"), [(0, 0), (0.001, 1), (1, 1), (1.5, 2), (2.0, 2), (ladder.MAX_DELAY, ladder.MAX_DELAY)]
)
def test_delays_round_up_to_whole_seconds(delay: float, seconds: int) -> None:
    """Contract: Delayed jobs (a delay is a floor, so a fraction rounds up)."""
    assert ladder.whole_seconds(delay) == seconds


@pytest.mark.parametrize("delay", [ladder.MAX_DELAY + 0.5, ladder.MAX_DELAY + 1, 10**9])
def test_a_delay_past_the_ladder_is_rejected_before_anything_is_sent(
    rabbit: RabbitMqQueue, queue_name: str, delay: float
) -> None:
    """Contract: What push() guarantees (RabbitMQ's 4,194,303-second ceiling, raised before anything is sent)."""
    with pytest.raises(InvalidQueueArgumentError, match="4194303"):
        rabbit.push(Noop(), delay=delay, queue=queue_name)

    assert rabbit.declared == frozenset()
    assert rabbit._session is None  # not even a connection was opened
    assert rabbit.size(queue_name) == 0


def test_the_longest_delay_is_accepted_and_waits_in_the_top_tier(
    rabbit: RabbitMqQueue, queue_name: str, raw: Any
) -> None:
    """Contract: Delay ladder (4,194,303 s enters at the top tier, 2,097,152 s)."""
    rabbit.push(Noop(), delay=ladder.MAX_DELAY, queue=queue_name)

    assert raw.queue_declare(ladder.holding_queue(queue_name, 21), passive=True).message_count == 1
    assert rabbit.size(queue_name) == 1
    assert rabbit.clear(queue_name) == 1
    assert rabbit.size(queue_name) == 0


def test_a_release_past_the_ladder_is_rejected_and_the_job_stays_reserved(
    rabbit: RabbitMqQueue, queue_name: str
) -> None:
    """Contract: release() across backends (RabbitMQ's own ceiling, checked before any I/O)."""
    rabbit.push(Noop(), queue=queue_name)
    job = rabbit.pop(5, [queue_name])
    assert job is not None

    with pytest.raises(InvalidQueueArgumentError, match="release delay"):
        rabbit.release(job, ladder.MAX_DELAY + 1)

    assert rabbit.size(queue_name) == 0
    rabbit.ack(job)  # still the holder's to settle
    assert rabbit.pop(0.2, [queue_name]) is None


# -- the ladder on the broker ------------------------------------------------------------------------


def test_a_short_delay_is_not_held_behind_a_longer_one(rabbit: RabbitMqQueue, queue_name: str) -> None:
    """Contract: Delay ladder (a 1 s job pushed after a 7 s one is not held up by it)."""
    start = time.monotonic()
    later = rabbit.push(Records("7s"), delay=7, queue=queue_name)
    sooner = rabbit.push(Records("1s"), delay=1, queue=queue_name)

    delivered = rabbit.pop(5, [queue_name])

    elapsed = time.monotonic() - start
    assert delivered is not None
    assert delivered.id == sooner
    assert elapsed >= 1, f"delivered after {elapsed:.3f}s, before its 1s delay"  # the floor, not a speed claim
    rabbit.ack(delivered)
    assert rabbit.size(queue_name) == 1  # the 7 s job, still on its way down the ladder
    assert later != sooner


def test_delays_of_1_to_8_seconds_each_arrive_no_earlier_than_due_and_in_due_order(
    rabbit: RabbitMqQueue, queue_name: str
) -> None:
    """Contract: Delay ladder, Delayed jobs (every delay is a floor; nothing waits behind a longer delay)."""
    start = time.monotonic()
    delays = [5, 1, 8, 3, 1.5, 7, 4, 6]
    pushed = {rabbit.push(Records(f"{delay}s"), delay=delay, queue=queue_name): delay for delay in delays}

    arrivals = []
    while len(arrivals) < len(delays):
        job = rabbit.pop(10, [queue_name])
        assert job is not None, f"only {len(arrivals)} of {len(delays)} delayed jobs arrived"
        arrivals.append((pushed[job.id], time.monotonic() - start))
        rabbit.ack(job)

    assert [delay for delay, _ in arrivals] == sorted(delays)
    late = [(delay, round(at, 3)) for delay, at in arrivals if at < delay]
    assert late == [], "delivered before their delay"
    assert rabbit.size(queue_name) == 0


def test_a_job_released_three_times_with_a_1s_delay_arrives_each_time(rabbit: RabbitMqQueue, queue_name: str) -> None:
    """Contract: Settlement (the replacement carries no x-death, so its second pass through the 1 s tier is not
    taken for a dead-letter cycle and dropped)."""
    job_id = rabbit.push(Records("retried"), queue=queue_name, max_attempts=9)
    job = rabbit.pop(5, [queue_name])

    for attempt in (2, 3, 4):
        assert job is not None
        released = time.monotonic()
        rabbit.release(job, 1)
        job = rabbit.pop(5, [queue_name])
        assert job is not None, f"the release before attempt {attempt} was lost in the ladder"
        assert (job.id, job.attempts, job.max_attempts) == (job_id, attempt, 9)
        assert time.monotonic() - released >= 1

    assert job is not None
    rabbit.ack(job)
    assert rabbit.size(queue_name) == 0


def test_a_job_released_twice_through_two_tiers_arrives_each_time(rabbit: RabbitMqQueue, queue_name: str) -> None:
    """Contract: Settlement (no x-death on the replacement).

    3 s is the 2 s tier, then the 1 s tier. On the second pass the broker dead-letters the message into the
    1 s tier again; had the replacement kept the first pass's x-death, RabbitMQ would take that for a
    dead-letter cycle and drop it (checked on RabbitMQ 3.10: it does).
    """
    job_id = rabbit.push(Records("retried"), queue=queue_name)
    job = rabbit.pop(5, [queue_name])

    for attempt in (2, 3):
        assert job is not None
        rabbit.release(job, 3)
        job = rabbit.pop(10, [queue_name])
        assert job is not None, f"the release before attempt {attempt} was dropped in the ladder"
        assert (job.id, job.attempts) == (job_id, attempt)

    assert job is not None
    rabbit.ack(job)
    assert rabbit.size(queue_name) == 0


def test_a_delayed_push_declares_durable_tiers_up_to_its_highest_bit(
    rabbit: RabbitMqQueue, queue_name: str, raw: Any
) -> None:
    """Contract: Delay ladder (a delayed push declares the tiers its delay uses; tiers are ordinary durable queues).

    A redeclaration that differs only in durability is refused by the broker (406), which proves what the
    stored queue is.
    """
    rabbit.push(Noop(), delay=5, queue=queue_name)  # 4 + 1: enters at tier 2

    for tier in (0, 1, 2):
        name = ladder.holding_queue(queue_name, tier)
        assert raw.queue_declare(name, passive=True).message_count == (1 if tier == 2 else 0)
        with pytest.raises(amqp.exceptions.PreconditionFailed, match="durable"):
            raw.queue_declare(
                name, durable=False, auto_delete=False, arguments=ladder.holding_arguments(queue_name, tier)
            )
        with pytest.raises(amqp.exceptions.PreconditionFailed, match="durable"):
            raw.exchange_declare(ladder.tier_exchange(queue_name, tier), "topic", durable=False, auto_delete=False)
    with pytest.raises(amqp.exceptions.PreconditionFailed, match="durable"):
        raw.queue_declare(queue_name, durable=False, auto_delete=False)
    assert not queue_exists(ladder.holding_queue(queue_name, 3))

    # size() counts the tiers that exist and declares none above them.
    assert rabbit.size(queue_name) == 1
    assert not queue_exists(ladder.holding_queue(queue_name, 3))


def test_every_tier_lives_without_x_expires_behind_its_exchange(
    rabbit: RabbitMqQueue, queue_name: str, raw: Any
) -> None:
    """RELIABILITY.md §3 D5: no tier of the ladder can expire (a queue with ``x-expires`` is deleted once
    unused, with the delayed jobs in it), and every tier's dead-letter exchange exists.

    The broker refuses a redeclaration whose equivalence-checked arguments differ (406): the same
    arguments without ``x-expires`` are accepted, and the same plus ``x-expires`` are refused.
    """
    rabbit.push(Noop(), delay=ladder.MAX_DELAY, queue=queue_name)  # enters at the top tier: declares all 22
    for tier in range(ladder.TIERS):
        name, arguments = ladder.holding_queue(queue_name, tier), ladder.holding_arguments(queue_name, tier)
        channel = raw.connection.channel()
        channel.queue_declare(name, durable=True, auto_delete=False, arguments=arguments)
        channel.exchange_declare(ladder.tier_exchange(queue_name, tier), "topic", passive=True)
        if tier:  # the exchange this tier dead-letters into
            channel.exchange_declare(arguments["x-dead-letter-exchange"], "topic", passive=True)
        channel.close()
        probe = raw.connection.channel()
        with pytest.raises(amqp.exceptions.PreconditionFailed, match="x-expires"):
            probe.queue_declare(name, durable=True, auto_delete=False, arguments={**arguments, "x-expires": 3_600_000})


def test_size_and_clear_reach_every_tier(rabbit: RabbitMqQueue, queue_name: str) -> None:
    """Contract: Counting and clearing (size() sums the real queue and every tier that exists, here all 22 after
    the longest delay; clear() purges them all)."""
    for delay in (0, 0, 10, 100, 40_000, ladder.MAX_DELAY):
        rabbit.push(Noop(), delay=delay, queue=queue_name)
    held = rabbit.pop(5, [queue_name])
    assert held is not None

    assert rabbit.size(queue_name) == 5
    assert rabbit.clear(queue_name) == 5

    assert rabbit.size(queue_name) == 0
    rabbit.ack(held)  # the broker never purges a delivered, unacked message
    assert rabbit.pop(1.5, [queue_name]) is None


def test_stats_split_ready_and_delayed_jobs(rabbit: RabbitMqQueue, queue_name: str) -> None:
    """queue_status: ready is the queue, delayed its ladder; the broker's counts leave delivered jobs out."""
    rabbit.push(Noop(), queue=queue_name)
    rabbit.push(Noop(), queue=queue_name)
    rabbit.push(Noop(), delay=600, queue=queue_name)
    held = rabbit.pop(5, [queue_name])
    assert held is not None

    stats = rabbit.stats(queue_name)

    assert (stats.waiting, stats.ready, stats.delayed, stats.reserved) == (2, 1, 1, None)
    assert stats.approximate is True
    rabbit.ack(held)
    assert rabbit.size(queue_name) == 2


def _exchange_exists(name: str) -> bool:
    connection = amqp.Connection(host=BROKER)
    connection.connect()
    try:
        connection.channel().exchange_declare(name, "topic", passive=True)
        return True
    except amqp.exceptions.NotFound:
        return False
    finally:
        connection.close()


def test_reads_of_a_queue_without_delayed_jobs_declare_no_ladder(rabbit: RabbitMqQueue, queue_name: str) -> None:
    """size(), stats() and clear() count and purge the tiers that exist and create none: a dashboard or a
    metrics scrape reading every queue's depth must not give each queue 22 holding queues and exchanges."""
    assert rabbit.size(queue_name) == 0  # a queue never used
    rabbit.push(Noop(), queue=queue_name)
    rabbit.push(Noop(), queue=queue_name)

    assert rabbit.size(queue_name) == 2
    stats = rabbit.stats(queue_name)
    assert (stats.waiting, stats.ready, stats.delayed) == (2, 2, 0)
    assert rabbit.clear(queue_name) == 2
    assert rabbit.size(queue_name) == 0

    assert not queue_exists(ladder.holding_queue(queue_name, 0))
    assert not _exchange_exists(ladder.tier_exchange(queue_name, 0))
    assert not queue_exists(ladder.holding_queue(queue_name, ladder.TOP_TIER))
    # A delayed push afterwards still declares the tiers it needs, and the reads count them.
    rabbit.push(Noop(), delay=3, queue=queue_name)  # 2 + 1: enters at tier 1
    assert rabbit.stats(queue_name).delayed == 1
    assert queue_exists(ladder.holding_queue(queue_name, 1))
    assert not queue_exists(ladder.holding_queue(queue_name, 2))


def test_reads_count_and_clear_the_tiers_a_delayed_push_declared_and_no_more(
    rabbit: RabbitMqQueue, queue_name: str, raw: Any
) -> None:
    """Tiers 0..6 exist (a 100 s delay enters at tier 6, 64 s): both delayed jobs are counted and purged,
    the ready one too, and tier 7 is never declared."""
    rabbit.push(Noop(), delay=100, queue=queue_name)  # waits 64 s in tier 6
    rabbit.push(Noop(), delay=40, queue=queue_name)  # waits 32 s in tier 5
    rabbit.push(Noop(), queue=queue_name)

    stats = rabbit.stats(queue_name)
    assert (stats.waiting, stats.ready, stats.delayed) == (3, 1, 2)
    assert rabbit.size(queue_name) == 3
    assert rabbit.clear(queue_name) == 3

    assert rabbit.size(queue_name) == 0
    for tier in range(7):
        assert raw.queue_declare(ladder.holding_queue(queue_name, tier), passive=True).message_count == 0
    assert not queue_exists(ladder.holding_queue(queue_name, 7))


def test_reads_after_another_process_deleted_the_queue_and_its_ladder_count_what_is_there(
    make_queue: Callable[..., RabbitMqQueue], queue_name: str
) -> None:
    """A ladder deleted under a reader (here by another connection's delete(), top tier first) is read as
    what is left, not an error, and is not declared again by the read."""
    rabbit, other = make_queue(), make_queue()
    rabbit.push(Noop(), delay=100, queue=queue_name)
    assert rabbit.size(queue_name) == 1

    other.delete(queue_name)

    assert rabbit.stats(queue_name).delayed == 0
    assert rabbit.clear(queue_name) == 0
    assert not queue_exists(ladder.holding_queue(queue_name, 0))


# -- publishing --------------------------------------------------------------------------------------


def test_a_push_to_a_queue_deleted_under_the_pusher_is_not_confirmed(
    rabbit: RabbitMqQueue, queue_name: str, raw: Any
) -> None:
    """Contract: Publishing (mandatory publishing turns a deleted queue into PublishNotConfirmedError, never a
    silent drop)."""
    rabbit.push(Noop(), queue=queue_name)
    raw.queue_delete(queue_name)

    with pytest.raises(PublishNotConfirmedError, match="unroutable"):
        rabbit.push(Noop(), queue=queue_name)

    assert not queue_exists(queue_name)
    # The connection survives a returned message; the next push declares the queue again.
    rabbit.push(Noop(), queue=queue_name)
    assert rabbit.size(queue_name) == 1


def test_a_delayed_push_into_a_deleted_tier_is_not_confirmed(rabbit: RabbitMqQueue, queue_name: str, raw: Any) -> None:
    """Contract: Publishing (a delayed publish is mandatory too: a tier deleted under the pusher is an error)."""
    rabbit.push(Noop(), delay=2, queue=queue_name)
    raw.queue_delete(ladder.holding_queue(queue_name, 1))

    with pytest.raises(PublishNotConfirmedError, match="unroutable"):
        rabbit.push(Noop(), delay=2, queue=queue_name)

    rabbit.push(Noop(), delay=2, queue=queue_name)  # the tier is declared again
    assert rabbit.size(queue_name) == 1


@pytest.fixture
def rejecting_policy(queue_name: str) -> Iterator[None]:
    """A broker policy capping the test's queue at 0 messages with reject-publish: every publish is nacked."""
    ctl = shutil.which("rabbitmqctl")
    if ctl is None:
        pytest.skip("rabbitmqctl is not available to set a queue-length policy")
    name = f"kinetis-test-{queue_name}"
    policy = json.dumps({"max-length": 0, "overflow": "reject-publish"})
    done = subprocess.run(
        [ctl, "-q", "set_policy", "--apply-to", "queues", name, f"^{queue_name}$", policy],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"rabbitmqctl set_policy failed: {done.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run([ctl, "-q", "clear_policy", name], capture_output=True, timeout=60, check=False)


@pytest.mark.usefixtures("rejecting_policy")
def test_a_nacked_publish_raises_and_the_connection_goes_on(rabbit: RabbitMqQueue, queue_name: str) -> None:
    """Contract: Publishing (a nack is not an acknowledgement: PublishNotConfirmedError)."""
    with pytest.raises(PublishNotConfirmedError, match="nack"):
        rabbit.push(Noop(), queue=queue_name)

    assert rabbit.size(queue_name) == 0
    assert rabbit.size(f"{queue_name}-other") == 0  # same connection, still usable


def test_a_publish_over_max_message_size_raises_and_the_connection_and_its_deliveries_go_on(
    rabbit: RabbitMqQueue, queue_name: str
) -> None:
    """The broker refuses a message over its max_message_size by closing the publisher channel (406): the push
    raises PublishNotConfirmedError naming the reason, and the connection goes on, with the delivery it holds
    (before the fix the whole connection was dropped: the held job was requeued and its ack raised)."""
    with small_max_message_size() as limit:
        rabbit.push(Records("held"), queue=queue_name)  # the channels open under the lowered limit
        held = rabbit.pop(5, [queue_name])
        assert held is not None
        session = rabbit._session

        with pytest.raises(PublishNotConfirmedError, match=r"refused the publish .*\(406 PRECONDITION_FAILED") as err:
            rabbit.push(Records("x" * (limit + 1000)), queue=queue_name)
        assert "was not queued" in str(err.value) and "xxxxxxxxxx" not in str(err.value)
        with pytest.raises(PublishNotConfirmedError, match=r"refused a publish of 3 .*\(406 PRECONDITION_FAILED"):
            rabbit.push_many([Records("a"), Records("x" * (limit + 1000)), Records("b")], queue=queue_name)

        assert rabbit._session is session
        rabbit.ack(held)  # still held on the same channel
        rabbit.push(Records("after"), queue=queue_name)
    labels = []
    while (job := rabbit.pop(1, [queue_name])) is not None:
        labels.append(job.args["label"])
        rabbit.ack(job)
    assert labels == ["a", "after"]  # "a" went before the refused one; "b" after it was dropped


def test_a_publish_whose_connection_dropped_is_not_confirmed(
    make_queue: Callable[..., RabbitMqQueue], queue_name: str
) -> None:
    """Contract: Publishing (no confirmation at all raises PublishNotConfirmedError; the next call reconnects).

    Heartbeats are off, so no pump thread can notice the dropped connection before the push does.
    """
    rabbit = make_queue(heartbeat=0)
    rabbit.push(Noop(), queue=queue_name)
    _drop_connection(rabbit)

    with pytest.raises(PublishNotConfirmedError, match="unknown"):
        rabbit.push(Noop(), queue=queue_name)

    rabbit.push(Noop(), queue=queue_name)
    assert rabbit.size(queue_name) == 2


def test_an_unreachable_broker_is_a_connection_failure_without_the_password(
    make_queue: Callable[..., Any], queue_name: str
) -> None:
    """Contract: Failure vocabulary (nothing was sent); messages never repeat credentials."""
    queue = make_queue(url="amqp://someone:s3cret-pass@127.0.0.1:9/")

    with pytest.raises(ConnectionFailedError, match=r"127\.0\.0\.1:9\b") as raised:
        queue.push(Noop(), queue=queue_name)

    assert "s3cret-pass" not in str(raised.value)


# -- what a message carries ---------------------------------------------------------------------------


def test_push_writes_no_attempts_header_and_release_writes_one(
    rabbit: RabbitMqQueue, queue_name: str, raw: Any
) -> None:
    """Contract: Settlement (attempts, maxAttempts and metadata travel as headers; only release() writes attempts;
    messages are persistent)."""
    job_id = rabbit.push(Records("headers"), queue=queue_name, max_attempts=4)

    stored = raw.basic_get(queue_name)
    assert stored is not None
    headers = stored.properties["application_headers"]
    assert headers == {"maxAttempts": 4, "metadata": "{}"}
    assert stored.properties["delivery_mode"] == 2
    assert json.loads(stored.body).keys() == {"id", "pushedAt", "class", "args"}
    raw.basic_reject(stored.delivery_tag, requeue=True)

    job = rabbit.pop(5, [queue_name])
    assert job is not None
    rabbit.release(job)
    rabbit.dispose()  # its consumer may hold the replacement (prefetch): closing gives it back to the queue
    again = raw.basic_get(queue_name)

    assert again is not None
    assert again.properties["application_headers"] == {"attempts": 1, "maxAttempts": 4, "metadata": "{}"}
    assert json.loads(again.body)["id"] == job_id
    assert again.body == stored.body  # the job itself is republished as stored


def test_a_broker_redelivery_keeps_the_attempt_count_and_the_old_receipt_cannot_settle(
    make_queue: Callable[..., RabbitMqQueue], queue_name: str
) -> None:
    """Contract: Reservation and recovery (requeued as soon as the connection drops, attempts unchanged); Delivery
    receipts (RabbitMQ is unfenced: the dead receipt raises a connection error, not StaleJobHandleError)."""
    worker, other = make_queue(), make_queue()
    job_id = worker.push(Records("dropped"), queue=queue_name, max_attempts=3)
    held = worker.pop(5, [queue_name])
    assert held is not None

    _drop_connection(worker)
    again = other.pop(10, [queue_name])

    assert again is not None
    assert (again.id, again.attempts, again.max_attempts) == (job_id, 1, 3)
    for settle in (worker.ack, worker.fail, worker.release):
        with pytest.raises(ConnectionFailedError, match="requeue"):
            settle(held)
    other.ack(again)
    assert other.size(queue_name) == 0
    assert other.pop(0.5, [queue_name]) is None


def test_a_broker_redelivery_goes_behind_the_waiting_jobs(
    make_queue: Callable[..., RabbitMqQueue], queue_name: str, raw: Any
) -> None:
    """A crash-looping job cannot hold a queue (RELIABILITY.md A7): the broker requeues a dropped delivery at
    the head, and the next pop moves it behind the jobs that waited, as one job, attempts unchanged."""
    worker, other = make_queue(), make_queue()
    first = worker.push(Records("first"), queue=queue_name, max_attempts=3)
    second = worker.push(Records("second"), queue=queue_name)
    held = worker.pop(5, [queue_name])
    assert held is not None and held.id == first

    _drop_connection(worker)
    wait_until(lambda: raw.queue_declare(queue_name, passive=True).message_count == 2, timeout=10)
    taken = [other.pop(5, [queue_name]) for _ in range(2)]

    assert [(job.id, job.attempts) for job in taken if job is not None] == [(second, 1), (first, 1)]
    assert taken[1] is not None and (taken[1].max_attempts, taken[1].pushed_at) == (3, held.pushed_at)
    for job in taken:
        assert job is not None
        other.ack(job)
    assert other.pop(0.5, [queue_name]) is None


def test_a_settled_delivery_cannot_be_settled_again(rabbit: RabbitMqQueue, queue_name: str) -> None:
    """Contract: Fenced settlements, RabbitMQ row (reusing a delivery tag is a channel-level protocol error, so a
    repeated settlement is refused before anything is sent, and the connection goes on)."""
    rabbit.push(Noop(), queue=queue_name)
    job = rabbit.pop(5, [queue_name])
    assert job is not None
    rabbit.ack(job)

    for settle in (rabbit.ack, rabbit.fail, rabbit.release):
        with pytest.raises(InvalidQueueArgumentError, match="already settled"):
            settle(job)

    assert rabbit.size(queue_name) == 0  # no replacement was published
    session = rabbit._session
    rabbit.push(Noop(), queue=queue_name)
    assert rabbit._session is session and rabbit.size(queue_name) == 1


def test_a_receipt_settles_only_on_the_queue_that_popped_it(
    make_queue: Callable[..., RabbitMqQueue], queue_name: str
) -> None:
    """Contract: Delivery receipts (a delivery tag is scoped to its channel)."""
    first, second = make_queue(), make_queue()
    first.push(Noop(), queue=queue_name)
    job = first.pop(5, [queue_name])
    assert job is not None

    with pytest.raises(InvalidQueueArgumentError, match="another RabbitMqQueue"):
        second.ack(job)

    first.ack(job)
    assert first.pop(0.5, [queue_name]) is None


def test_dispose_closes_the_connection_and_the_broker_requeues_what_it_held(
    make_queue: Callable[..., RabbitMqQueue], queue_name: str
) -> None:
    """Contract: Connection ownership (dispose() closes the connection the queue opened; idempotent)."""
    unused = make_queue()
    unused.dispose()
    unused.dispose()
    queue, other = make_queue(), make_queue()
    queue.push(Noop(), queue=queue_name)
    held = queue.pop(5, [queue_name])
    assert held is not None

    queue.dispose()
    queue.dispose()

    with pytest.raises(ConnectionFailedError):
        queue.ack(held)
    again = other.pop(10, [queue_name])
    assert again is not None and (again.id, again.attempts) == (held.id, 1)
    other.ack(again)


# -- malformed messages -------------------------------------------------------------------------------

GOOD_BODY = {"id": "0" * 32, "pushedAt": 1.5, "class": "tests.jobs.Noop", "args": {}}
GOOD_HEADERS = {"maxAttempts": None, "metadata": "{}"}


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        pytest.param(b"not json", GOOD_HEADERS, id="body-not-json"),
        pytest.param(b'{"id": NaN}', GOOD_HEADERS, id="body-nan"),
        pytest.param(json.dumps([1]).encode(), GOOD_HEADERS, id="body-array"),
        pytest.param(json.dumps({**GOOD_BODY, "attempts": 0}).encode(), GOOD_HEADERS, id="body-extra-key"),
        pytest.param(json.dumps({**GOOD_BODY, "id": "x"}).encode(), GOOD_HEADERS, id="id-not-hex"),
        pytest.param(json.dumps({**GOOD_BODY, "args": []}).encode(), GOOD_HEADERS, id="args-array"),
        pytest.param(json.dumps(GOOD_BODY).encode(), None, id="no-headers"),
        pytest.param(json.dumps(GOOD_BODY).encode(), {"metadata": "{}"}, id="no-max-attempts"),
        pytest.param(json.dumps(GOOD_BODY).encode(), {"maxAttempts": None}, id="no-metadata"),
        pytest.param(json.dumps(GOOD_BODY).encode(), {**GOOD_HEADERS, "metadata": "[]"}, id="metadata-array"),
        pytest.param(json.dumps(GOOD_BODY).encode(), {**GOOD_HEADERS, "metadata": 5}, id="metadata-not-a-string"),
        pytest.param(json.dumps(GOOD_BODY).encode(), {**GOOD_HEADERS, "attempts": -1}, id="attempts-negative"),
        pytest.param(json.dumps(GOOD_BODY).encode(), {**GOOD_HEADERS, "attempts": True}, id="attempts-bool"),
        pytest.param(json.dumps(GOOD_BODY).encode(), {**GOOD_HEADERS, "attempts": None}, id="attempts-null"),
        pytest.param(json.dumps(GOOD_BODY).encode(), {**GOOD_HEADERS, "maxAttempts": "3"}, id="max-attempts-str"),
    ],
)
def test_a_malformed_message_is_rejected_and_the_queue_flows_on(
    rabbit: RabbitMqQueue, queue_name: str, raw: Any, body: bytes, headers: dict[str, Any] | None
) -> None:
    """Contract: Malformed stored messages (another publisher's message that does not decode is removed with a
    reject without requeue, and pop() raises MalformedJobSettledError)."""
    rabbit.size(queue_name)  # declares the queue as the backend does
    properties: dict[str, Any] = {"delivery_mode": 2}
    if headers is not None:
        properties["application_headers"] = headers
    raw.basic_publish_confirm(amqp.Message(body, **properties), exchange="", routing_key=queue_name)
    healthy = rabbit.push(Records("healthy"), queue=queue_name)

    with pytest.raises(MalformedJobSettledError):
        rabbit.pop(5, [queue_name])

    delivered = rabbit.pop(5, [queue_name])
    assert delivered is not None
    assert (delivered.id, delivered.attempts) == (healthy, 1)
    rabbit.ack(delivered)
    assert rabbit.size(queue_name) == 0
    assert rabbit.pop(0.5, [queue_name]) is None  # the malformed one is gone, not requeued


def test_a_well_formed_foreign_message_is_delivered(rabbit: RabbitMqQueue, queue_name: str, raw: Any) -> None:
    """Contract: Settlement (a message without an attempts header is on its first attempt)."""
    rabbit.size(queue_name)
    raw.basic_publish_confirm(
        amqp.Message(json.dumps(GOOD_BODY).encode(), application_headers=GOOD_HEADERS),
        exchange="",
        routing_key=queue_name,
    )

    job = rabbit.pop(5, [queue_name])

    assert job is not None
    assert (job.id, job.job_class, job.attempts, job.max_attempts) == (GOOD_BODY["id"], "tests.jobs.Noop", 1, None)
    rabbit.ack(job)
    assert rabbit.size(queue_name) == 0


# -- settings -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("amqp://guest:guest@127.0.0.1:5672//", ("127.0.0.1", 5672, "guest", "guest", "/", False)),
        ("amqp://host", ("host", 5672, "guest", "guest", "/", False)),
        ("amqp://u%40x:p%2Fw@host/", ("host", 5672, "u@x", "p/w", "/", False)),
        ("amqp://u:p@host:5673/prod", ("host", 5673, "u", "p", "prod", False)),
        ("amqp://u:p@host/%2Fprod", ("host", 5672, "u", "p", "/prod", False)),
        ("amqps://u:p@broker.example.com/", ("broker.example.com", 5671, "u", "p", "/", True)),
        ("amqp://[::1]:5672/", ("::1", 5672, "guest", "guest", "/", False)),
    ],
)
def test_urls_parse_like_kombus(url: str, expected: tuple[Any, ...]) -> None:
    """DESIGN.md §5: URL is amqp://user:password@host:port/vhost, TLS through amqps://."""
    params = parse_url(url, "URL")

    assert (params.host, params.port, params.userid, params.password, params.virtual_host, params.tls) == expected
    assert "password" not in repr(params)


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        ({"URL": "redis://host"}, "URL"),
        ({"URL": 5}, "URL"),
        ({"HEARTBEAT": -1}, "HEARTBEAT"),
        ({"HEARTBEAT": 2.5}, "HEARTBEAT"),
        ({"HEARTBEAT": 70000}, "HEARTBEAT"),
        ({"EXCHANGE": "x"}, "EXCHANGE"),
    ],
)
def test_bad_settings_are_rejected_naming_the_key(entry: dict[str, Any], key: str) -> None:
    """DESIGN.md §5: bad settings fail at start-up with a message naming the key."""
    setting = {"CONNECTIONS": {"rabbit": {"BACKEND": "rabbitmq", **entry}}, "DEFAULT_CONNECTION": "rabbit"}
    with override_settings(KINETIS_QUEUE=setting), pytest.raises(QueueConfigurationError) as raised:
        conf.load()
    assert f"['rabbit']['{key}']" in str(raised.value)


@pytest.mark.parametrize(
    "url", ["amqp://u:s3cret@host:5672/?heartbeat=5", "amqp://u:s3cret@:5672/", "amqp://u:s3cret@host:port/"]
)
def test_a_url_the_queue_cannot_use_fails_when_built_naming_the_key_but_not_the_password(url: str) -> None:
    """DESIGN.md §5: the full parse happens when the connection is built; the message never shows the URL."""
    setting = {"CONNECTIONS": {"rabbit": {"BACKEND": "rabbitmq", "URL": url}}, "DEFAULT_CONNECTION": "rabbit"}
    with override_settings(KINETIS_QUEUE=setting), pytest.raises(QueueConfigurationError) as raised:
        connections.build("rabbit")
    assert "['rabbit']['URL']" in str(raised.value)
    assert "s3cret" not in str(raised.value)


def test_heartbeat_comes_from_the_settings(janitor: set[str], queue_name: str) -> None:
    """DESIGN.md §5: HEARTBEAT (seconds, 0 = off) is the interval proposed to the broker."""
    setting = {
        "CONNECTIONS": {"rabbit": {"BACKEND": "rabbitmq", "URL": RABBITMQ_URL, "HEARTBEAT": 7}},
        "DEFAULT_CONNECTION": "rabbit",
    }
    with override_settings(KINETIS_QUEUE=setting):
        queue = connections.build("rabbit")
    assert isinstance(queue, RabbitMqQueue)
    try:
        assert queue.heartbeat == 7
        assert queue.size(queue_name) == 0
        assert queue._session is not None and queue._session.heartbeat == 7  # negotiated with the broker
    finally:
        queue.dispose()
    assert connections.build("rabbitmq").heartbeat == 60  # type: ignore[attr-defined]


# -- consumers, prefetch and the batch operations (issue 14) ------------------------------------------


def _unread_bytes(sock: Any) -> int:
    """The bytes in a socket's receive queue, not read yet (FIONREAD)."""
    return int(struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0])


def _ready(raw: Any, queue: str) -> int:
    return int(raw.queue_declare(queue, passive=True).message_count)


def _labels(jobs: list[Any]) -> list[str]:
    return [job.args["label"] for job in jobs]


def test_a_consumer_holds_at_most_its_prefetch_and_size_counts_what_it_buffered(
    rabbit: RabbitMqQueue, queue_name: str, raw: Any
) -> None:
    """pop_many(limit) consumes with a prefetch of ``limit``: the broker sends no more than that many unacked
    deliveries; those received and not handed out yet still count as waiting in size()."""
    rabbit.push_many([Records(f"job-{i}") for i in range(6)], queue=queue_name)

    first = rabbit.pop_many(5, [queue_name], 2)

    assert _labels(first.jobs) == ["job-0", "job-1"]
    wait_until(lambda: _ready(raw, queue_name) == 4, timeout=10)
    assert rabbit.size(queue_name) == 4

    assert rabbit.ack_many(first.jobs) == [None, None]
    wait_until(lambda: _ready(raw, queue_name) == 2, timeout=10)  # two more sent to the consumer
    assert rabbit.size(queue_name) == 4  # ... and still counted as waiting
    rest = _drain_all(rabbit, queue_name, 4, limit=2)
    assert _labels(rest) == ["job-2", "job-3", "job-4", "job-5"]
    assert rabbit.ack_many(rest) == [None] * 4
    assert rabbit.size(queue_name) == 0


def _drain_all(rabbit: RabbitMqQueue, queue: str, expected: int, limit: int) -> list[Any]:
    held: list[Any] = []
    while len(held) < expected:
        reserved = rabbit.pop_many(5, [queue], limit)
        assert reserved.jobs and len(reserved.jobs) <= limit
        held += reserved.jobs
    return held


def test_a_saturated_higher_queue_is_fetched_before_a_lower_queues_buffer(
    rabbit: RabbitMqQueue, janitor: set[str], queue_name: str
) -> None:
    """Priority with consumers: the high queue's consumer holds its whole prefetch (both jobs are running), the
    low queue's consumer has buffered jobs, and a job arrives on the high queue: it is handed out first."""
    high, low = f"{queue_name}-hi", queue_name
    janitor.add(high)
    rabbit.push_many([Records(f"high-{i}") for i in range(2)], queue=high)
    rabbit.push_many([Records(f"low-{i}") for i in range(4)], queue=low)
    running = rabbit.pop_many(5, [high, low], 2)
    assert _labels(running.jobs) == ["high-0", "high-1"]
    wait_until(lambda: len(rabbit._session.buffers.get(low, ())) == 2 if rabbit._session else False, timeout=10)

    rabbit.push(Records("high-2"), queue=high)
    nxt = rabbit.pop_many(5, [high, low], 2)

    assert _labels(nxt.jobs) == ["high-2", "low-0"]
    assert rabbit.ack_many(running.jobs + nxt.jobs) == [None] * 4


def test_a_higher_queue_buffer_is_handed_out_before_a_lower_one(
    rabbit: RabbitMqQueue, janitor: set[str], queue_name: str
) -> None:
    """Both consumers have buffered jobs: every high job comes before any low one, whatever arrived first."""
    high, low = f"{queue_name}-hi", queue_name
    janitor.add(high)
    rabbit.pop_many(0.1, [high, low], 4)  # starts both consumers on empty queues
    rabbit.push_many([Records(f"low-{i}") for i in range(3)], queue=low)
    rabbit.push_many([Records(f"high-{i}") for i in range(3)], queue=high)
    wait_until(lambda: rabbit.size(high) == 3 and rabbit.size(low) == 3, timeout=10)
    assert rabbit._session is not None and len(rabbit._session.buffers[low]) == 3

    held = rabbit.pop_many(5, [high, low], 4).jobs

    assert _labels(held) == ["high-0", "high-1", "high-2", "low-0"]
    assert rabbit.ack_many(held) == [None] * 4


def test_unreserve_keeps_the_attempt_and_the_place_at_the_head(rabbit: RabbitMqQueue, queue_name: str) -> None:
    """unreserve(): a reject with requeue puts the job back at the head with its headers unchanged; this
    connection hands the redelivery out in place instead of moving it behind as a crash redelivery."""
    rabbit.push_many([Records("first", items=[1]), Records("second")], queue=queue_name)
    first = rabbit.pop_many(5, [queue_name], 1).jobs[0]
    rabbit.release(first)  # attempts 1 written by release: unreserve must keep it
    again = rabbit.pop_many(5, [queue_name], 1).jobs[0]
    assert (again.args["label"], again.attempts) == ("second", 1)
    replaced = rabbit.pop_many(5, [queue_name], 1).jobs[0]
    assert (replaced.args["label"], replaced.attempts) == ("first", 2)

    rabbit.unreserve(replaced)
    rabbit.unreserve(again)

    back = _drain_all(rabbit, queue_name, 2, limit=1)
    assert [(job.args["label"], job.attempts) for job in back] == [("second", 1), ("first", 2)]
    with pytest.raises(InvalidQueueArgumentError, match="already settled"):
        rabbit.unreserve(replaced)
    assert rabbit.ack_many(back) == [None, None]
    assert rabbit.size(queue_name) == 0


def test_a_job_unreserved_by_another_connection_is_delivered_once_with_its_attempt(
    make_queue: Callable[..., RabbitMqQueue], queue_name: str
) -> None:
    """Another worker meets the redelivered flag without knowing it was given back: it moves the job behind
    (as after a crash), still once and with the same attempt."""
    worker, other = make_queue(), make_queue()
    job_id = worker.push(Records("given-back"), queue=queue_name)
    held = worker.pop_many(5, [queue_name], 1).jobs[0]
    worker.unreserve(held)
    worker.dispose()

    again = other.pop_many(10, [queue_name], 5).jobs
    while not again:
        again = other.pop_many(10, [queue_name], 5).jobs
    assert [(job.id, job.attempts) for job in again] == [(job_id, 1)]
    assert other.ack_many(again) == [None]
    assert other.pop(0.5, [queue_name]) is None


def test_ack_many_reports_dead_and_settled_receipts_in_place(
    make_queue: Callable[..., RabbitMqQueue], janitor: set[str], queue_name: str
) -> None:
    """ack_many(): a receipt of a closed connection, or one settled already, is a StaleJobHandleError in its
    place; the live ones are acked; a receipt of another queue raises before anything is sent."""
    worker = make_queue(heartbeat=0)
    worker.push_many([Records(f"job-{i}") for i in range(4)], queue=queue_name)
    old = worker.pop_many(5, [queue_name], 1).jobs
    _drop_connection(worker)
    with pytest.raises(OSError):
        worker.size(queue_name)  # the failure is found and the connection discarded
    new = _drain_all(worker, queue_name, 4, limit=4)
    worker.ack(new[1])
    other, elsewhere = make_queue(), f"{queue_name}-other"
    janitor.add(elsewhere)
    other.push(Noop(), queue=elsewhere)
    foreign = other.pop(5, [elsewhere])
    assert foreign is not None

    with pytest.raises(InvalidQueueArgumentError, match="another RabbitMqQueue"):
        worker.ack_many([new[0], foreign])
    results = worker.ack_many([old[0], new[0], new[1], new[2], new[2], new[3]])

    assert [type(result).__name__ if result else None for result in results] == [
        "StaleJobHandleError",
        None,
        "StaleJobHandleError",
        None,
        "StaleJobHandleError",
        None,
    ]
    assert all(result.operation is JobSettlement.ACK for result in results if result)
    other.ack(foreign)
    assert worker.size(queue_name) == 0


def test_ack_many_acks_only_the_deliveries_named_even_between_held_ones(rabbit: RabbitMqQueue, queue_name: str) -> None:
    """The oldest run goes as one multiple ack only when no other held delivery lies inside it."""
    rabbit.push_many([Records(f"job-{i}") for i in range(6)], queue=queue_name)
    held = _drain_all(rabbit, queue_name, 6, limit=6)

    assert rabbit.ack_many([held[0], held[1], held[3], held[5]]) == [None] * 4
    rabbit.dispose()  # what was not acked goes back

    assert sorted(_labels(_drain_all(rabbit, queue_name, 2, limit=6))) == ["job-2", "job-4"]


def test_push_many_waits_once_per_batch_and_returns_the_ids_in_order(
    rabbit: RabbitMqQueue, queue_name: str, raw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """push_many(): every message published before the one wait for the confirmations."""
    waits: list[int] = []
    rabbit.size(queue_name)
    session = rabbit._session
    assert session is not None
    real = session.publish_all
    monkeypatch.setattr(
        session, "publish_all", lambda batch, timeout: (waits.append(len(batch)), real(batch, timeout))[1]
    )

    ids = rabbit.push_many([Records(f"job-{i}") for i in range(50)], queue=queue_name)

    assert waits == [50]
    assert _ready(raw, queue_name) == 50
    held = _drain_all(rabbit, queue_name, 50, limit=50)
    assert [job.id for job in held] == ids


@pytest.mark.usefixtures("rejecting_policy")
def test_a_nacked_batch_names_how_many_were_not_queued(rabbit: RabbitMqQueue, queue_name: str) -> None:
    with pytest.raises(PublishNotConfirmedError, match=r"did not queue 3 of 3 jobs \(3 refused with a nack"):
        rabbit.push_many([Noop(), Noop(), Noop()], queue=queue_name)
    assert rabbit.size(queue_name) == 0


def test_a_batch_with_an_unroutable_message_names_it_and_queues_the_rest(
    rabbit: RabbitMqQueue, janitor: set[str], queue_name: str, raw: Any
) -> None:
    gone = f"{queue_name}-gone"
    janitor.add(gone)
    rabbit.push(Noop(), queue=gone)
    rabbit.clear(gone)
    raw.queue_delete(gone)  # deleted under the pusher, which believes it declared
    prepared = [rabbit.prepare(Records("kept"), queue=queue_name), rabbit.prepare(Noop(), queue=gone)]

    with pytest.raises(PublishNotConfirmedError, match=r"did not queue 1 of 2 jobs \(0 refused .* 1 returned"):
        rabbit.send_many(prepared)

    assert rabbit.size(queue_name) == 1
    rabbit.push(Noop(), queue=gone)  # declared again
    assert rabbit.size(gone) == 1


def test_a_batch_whose_connection_dropped_is_unknown(make_queue: Callable[..., RabbitMqQueue], queue_name: str) -> None:
    rabbit = make_queue(heartbeat=0)
    rabbit.push(Noop(), queue=queue_name)
    _drop_connection(rabbit)

    with pytest.raises(PublishNotConfirmedError, match=r"did not confirm 3 publishes .* unknown"):
        rabbit.push_many([Noop(), Noop(), Noop()], queue=queue_name)


def test_a_push_wakes_a_waiting_pop(make_queue: Callable[..., RabbitMqQueue], queue_name: str) -> None:
    """_wait() ends when a consumer receives a delivery, not at the end of its pause."""
    worker, pusher = make_queue(), make_queue()
    worker.poll_pause = 1.0
    assert not worker.pop_many(0.01, [queue_name], 4)  # the consumer is started
    found: list[Any] = []
    waiter = threading.Thread(target=lambda: found.append(worker._wait((queue_name,), 300)))
    waiter.start()
    try:
        pusher.push(Records("wake"), queue=queue_name)
        wait_until(lambda: not waiter.is_alive(), timeout=60)
    finally:
        waiter.join()
    assert _labels(worker.pop_many(0, [queue_name], 4).jobs) == ["wake"]


def test_a_delivery_read_by_another_thread_wakes_the_waiter(
    make_queue: Callable[..., RabbitMqQueue], queue_name: str, raw: Any
) -> None:
    """A delivery that another thread reads (a job thread's publish waiting for its confirm) while the main
    thread waits leaves nothing on the socket: the consumer's callback writes to the wake-up pipe, so the
    wait still ends at once."""
    rabbit, pusher = make_queue(), make_queue()
    assert not rabbit.pop_many(0.01, [queue_name], 4)
    session = rabbit._session
    assert session is not None
    pusher.push(Records("read-elsewhere"), queue=queue_name)
    wait_until(session.readable, timeout=30)
    with rabbit._lock:  # what the other thread does: read the delivery while the waiter is waiting
        session.waiting = True
        session.drain()
        session.waiting = False
    assert len(session.buffers[queue_name]) == 1 and not session.readable()

    waiter = threading.Thread(target=session.wait_readable, args=(300,))
    waiter.start()
    try:
        wait_until(lambda: not waiter.is_alive(), timeout=60)
    finally:
        waiter.join()
    assert _labels(rabbit.pop_many(0, [queue_name], 4).jobs) == ["read-elsewhere"]


def test_a_drain_reads_a_bounded_number_of_frames(
    rabbit: RabbitMqQueue, queue_name: str, raw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One drain dispatches at most PUMP_MAX_FRAMES methods (a delivery with its content is one), so a flood of
    deliveries cannot hold the lock; the next drain reads on."""
    monkeypatch.setattr(session_module, "PUMP_MAX_FRAMES", 10)
    assert not rabbit.pop_many(0.01, [queue_name], 150)
    session = rabbit._session
    assert session is not None
    for _ in range(150):
        raw.basic_publish(amqp.Message(b"{}", delivery_mode=2), exchange="", routing_key=queue_name)
    # The flood is in this client's socket: more than 10 deliveries' bytes (one is about 110 bytes; 512 bounds
    # it). "Sent by the broker" was not enough: on a loaded machine 72 of 150 were still on their way.
    wait_until(lambda: _unread_bytes(session.connection.sock) > 11 * 512, timeout=30)

    buffered = session.buffers[queue_name]
    with rabbit._lock:
        session.drain()
    assert len(buffered) == 10
    taken: list[int] = []

    def drain_again() -> bool:
        with rabbit._lock:
            before = len(buffered)
            session.drain()
            taken.append(len(buffered) - before)
        return len(buffered) == 150

    wait_until(drain_again, timeout=30)
    assert max(taken) <= 10
    reserved = rabbit.pop_many(0, [queue_name], 150)
    assert len(reserved.malformed) == 150  # not ours: removed and reported


def test_threads_hammering_one_queue_lose_and_duplicate_nothing(rabbit: RabbitMqQueue, queue_name: str) -> None:
    """Several job threads push, release and unreserve while the main thread pops and acks on the same
    connection: every job is acked exactly once, and no thread raises."""
    threads_n, per_thread = 4, 25
    errors: list[BaseException] = []
    pushed: list[str] = []
    lock = threading.Lock()

    def pusher(index: int) -> None:
        try:
            for i in range(per_thread):
                job_id = rabbit.push(Records(f"t{index}-{i}"), queue=queue_name)
                with lock:
                    pushed.append(job_id)
        except BaseException as exc:
            errors.append(exc)

    def settle(job: Any, index: int) -> None:
        try:
            if index % 3 == 0:
                rabbit.release(job)
            elif index % 3 == 1:
                rabbit.unreserve(job)
            else:
                rabbit.ack(job)
                with lock:
                    acked.append(job.id)
        except BaseException as exc:
            errors.append(exc)

    acked: list[str] = []
    threads = [threading.Thread(target=pusher, args=(n,)) for n in range(threads_n)]
    for thread in threads:
        thread.start()
    given: set[str] = set()
    settlers: list[threading.Thread] = []
    count = 0
    while len(acked) < threads_n * per_thread:
        reserved = rabbit.pop_many(2, [queue_name], 8)
        if not reserved.jobs:  # the last jobs may be in the hands of a settler thread
            for settler in settlers:
                settler.join()
            if len(acked) == threads_n * per_thread:
                break
            reserved = rabbit.pop_many(10, [queue_name], 8)
            assert reserved.jobs, f"the queue ran dry before every job was acked (errors: {errors!r})"
        to_ack = []
        for job in reserved.jobs:
            count += 1
            if job.id not in given and count % 4 == 0:
                given.add(job.id)
                settler = threading.Thread(target=settle, args=(job, count // 4))
                settler.start()
                settlers.append(settler)
            else:
                to_ack.append(job)
        assert rabbit.ack_many(to_ack) == [None] * len(to_ack)
        with lock:
            acked.extend(job.id for job in to_ack)
    for thread in threads + settlers:
        thread.join()

    assert errors == []
    assert sorted(acked) == sorted(pushed)
    assert rabbit.size(queue_name) == 0


# -- faults and edges (issue 13 item 8: lines no test reached) ----------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"url": 5}, "url must be an amqp:// or amqps:// URL string"),
        ({"url": "http://u:s3cret@host/"}, "url must start with amqp:// or amqps://"),
        ({"heartbeat": -1}, "heartbeat must be an int"),
        ({"heartbeat": True}, "heartbeat must be an int"),
    ],
)
def test_a_queue_built_directly_checks_its_options_naming_them(options: dict[str, Any], message: str) -> None:
    """Built without settings (conf.py's checks do not run), the queue checks its own arguments."""
    with pytest.raises(QueueConfigurationError, match=message) as raised:
        RabbitMqQueue(**{"url": RABBITMQ_URL, **options})
    assert "s3cret" not in str(raised.value)


def test_tls_is_asked_for_with_amqps_and_a_plain_listener_fails_the_handshake(
    make_queue: Callable[..., RabbitMqQueue], queue_name: str
) -> None:
    """amqps:// connects with TLS (the certificate and host name checked): the broker's plain listener cannot
    answer the handshake, which is a connection failure naming the address and not the password."""
    queue = make_queue(url="amqps://guest:s3cret@127.0.0.1:5672/")

    with pytest.raises(ConnectionFailedError, match=r"amqps://127\.0\.0\.1:5672/") as raised:
        queue.push(Noop(), queue=queue_name)
    assert "s3cret" not in str(raised.value)


def test_a_job_sent_with_attempts_carries_them_and_keeps_them_when_moved_behind(
    make_queue: Callable[..., RabbitMqQueue], queue_name: str
) -> None:
    """A replacement sent with completed attempts writes the attempts header; a broker redelivery of it moved
    behind the waiting jobs keeps it."""
    worker, other = make_queue(), make_queue()
    envelope = replace(worker.prepare(Records("replaced"), queue=queue_name).envelope, attempts=2)
    worker.send(PreparedPush(envelope, 0, queue_name))
    held = worker.pop(5, [queue_name])
    assert held is not None and held.attempts == 3

    _drop_connection(worker)
    again = other.pop(10, [queue_name])

    assert again is not None and (again.id, again.attempts) == (held.id, 3)
    other.ack(again)


def test_a_sweep_on_a_dropped_connection_raises_and_the_next_one_reconnects(
    make_queue: Callable[..., RabbitMqQueue], queue_name: str
) -> None:
    rabbit = make_queue(heartbeat=0)
    rabbit.push(Records("survivor"), queue=queue_name)
    assert not rabbit.pop_many(0.01, [queue_name + "-empty"], 1)
    session = rabbit._session
    _drop_connection(rabbit)

    with pytest.raises((OSError, amqp.exceptions.ConnectionError)):
        rabbit.pop_many(5, [queue_name], 1)

    assert rabbit._session is None and session is not None and session.closed
    again = rabbit.pop_many(5, [queue_name], 1).jobs
    assert _labels(again) == ["survivor"]
    rabbit.ack(again[0])
    rabbit.delete(queue_name + "-empty")


def test_settlements_on_a_cut_connection_raise_connection_failures(
    make_queue: Callable[..., RabbitMqQueue], queue_name: str
) -> None:
    """The socket is cut under held deliveries and nobody has noticed: ack_many() and ack() fail to send,
    raise ConnectionFailedError and drop the connection; the broker requeues what was held."""
    rabbit = make_queue(heartbeat=0)
    rabbit.push_many([Records("a"), Records("b")], queue=queue_name)
    held = _drain_all(rabbit, queue_name, 2, limit=2)
    _drop_connection(rabbit)

    with pytest.raises(ConnectionFailedError, match="ack_many"):
        rabbit.ack_many(held)
    assert rabbit._session is None
    again = _drain_all(rabbit, queue_name, 2, limit=2)
    assert sorted(_labels(again)) == ["a", "b"]
    assert rabbit.ack_many(again) == [None, None]


def test_an_interrupt_during_a_settlement_drops_the_connection(
    rabbit: RabbitMqQueue, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job timeout (an exception that is not a connection error) raised while a settlement is sent leaves the
    channel in an unknown state: the connection is dropped, and the broker requeues the delivery."""
    rabbit.push(Records("interrupted"), queue=queue_name)
    held = rabbit.pop(5, [queue_name])
    assert held is not None and rabbit._session is not None

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise JobTimeoutInterrupt

    monkeypatch.setattr(rabbit._session.deliveries, "basic_ack", interrupted)
    with pytest.raises(JobTimeoutInterrupt):
        rabbit.ack(held)
    monkeypatch.undo()

    assert rabbit._session is None
    again = rabbit.pop(10, [queue_name])
    assert again is not None and (again.id, again.attempts) == (held.id, 1)
    rabbit.ack(again)


def test_queue_known_tells_a_declared_queue_from_a_missing_one(rabbit: RabbitMqQueue, queue_name: str) -> None:
    assert rabbit.queue_known(queue_name) is False
    rabbit.size(queue_name)
    assert rabbit.queue_known(queue_name) is True


def test_a_forked_child_opens_its_own_connection_and_leaves_the_parents_alone(
    rabbit: RabbitMqQueue, queue_name: str
) -> None:
    """After fork() the child finds the parent's connection unusable, forgets it without closing its socket
    (which the parent still uses) and opens its own."""
    rabbit.push(Noop(), queue=queue_name)
    parent_session = rabbit._session
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            rabbit.push(Noop(), queue=queue_name)
            code = 0 if rabbit._session is not parent_session else 2
        finally:
            exit_forked_child(code)
    _, status = os.waitpid(pid, 0)

    assert os.waitstatus_to_exitcode(status) == 0
    assert rabbit._session is parent_session and parent_session is not None and parent_session.usable()
    assert rabbit.size(queue_name) == 2


def test_the_heartbeat_pump_drops_a_connection_cut_while_idle(
    make_queue: Callable[..., RabbitMqQueue], queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The pump thread reads the connection while nobody uses it: a cut connection is found there, logged,
    and dropped; the next operation reconnects."""
    rabbit = make_queue(heartbeat=1)
    rabbit.push(Noop(), queue=queue_name)
    session = rabbit._session
    assert session is not None

    _drop_connection(rabbit)

    wait_until(lambda: rabbit._session is None, timeout=30)
    assert session.closed
    assert "lost while idle" in caplog.text
    assert rabbit.size(queue_name) == 1


def test_closing_a_session_twice_is_harmless(rabbit: RabbitMqQueue, queue_name: str) -> None:
    rabbit.size(queue_name)
    session = rabbit._session
    assert session is not None
    session.close(graceful=True)
    session.close(graceful=False)
    assert session.closed and not session.usable()
    assert rabbit.size(queue_name) == 0  # a new connection


def test_a_larger_limit_restarts_the_consumers_and_keeps_what_they_buffered(
    rabbit: RabbitMqQueue, queue_name: str, raw: Any
) -> None:
    rabbit.push_many([Records(f"job-{i}") for i in range(5)], queue=queue_name)
    first = rabbit.pop_many(5, [queue_name], 1).jobs
    session = rabbit._session
    assert session is not None and session.prefetch == 1
    old_consumer = session.consumers[queue_name]

    rest = _drain_all(rabbit, queue_name, 4, limit=4)

    assert session.prefetch == 4 and session.consumers[queue_name] != old_consumer
    assert _labels(first + rest) == [f"job-{i}" for i in range(5)]
    assert rabbit.ack_many(first + rest) == [None] * 5
    assert _ready(raw, queue_name) == 0


def test_a_queue_deleted_under_its_consumer_is_declared_again_by_the_next_pop(
    rabbit: RabbitMqQueue, queue_name: str, raw: Any
) -> None:
    """The broker cancels the consumer of a deleted queue: the wait ends, and the next sweep declares the
    queue again and consumes from it, instead of failing on the missing queue."""
    assert not rabbit.pop_many(0.01, [queue_name], 2)
    raw.queue_delete(queue_name)
    wait_until(lambda: rabbit._wait((queue_name,), 0.05) is None and queue_name not in rabbit._session.consumers)

    assert not rabbit.pop_many(0.2, [queue_name], 2)  # declared again, consumed again
    rabbit.push(Records("after"), queue=queue_name)
    assert _labels(_drain_all(rabbit, queue_name, 1, limit=2)) == ["after"]


def test_a_batch_whose_confirmations_are_not_in_by_the_deadline_is_unknown_and_drops_the_connection(
    rabbit: RabbitMqQueue, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The confirmation deadline passes before a single reply could be read: the batch is reported unknown
    (counted as unanswered) and the connection is dropped. Whether the broker had queued them depends on
    what it read before the drop: the next test shows a case where it had."""
    rabbit.size(queue_name)
    monkeypatch.setattr(rabbit_queue_module, "CONFIRM_TIMEOUT", 0.0)

    with pytest.raises(PublishNotConfirmedError, match=r"did not confirm 2 publishes \(TimeoutError: 2 publishes"):
        rabbit.push_many([Noop(), Noop()], queue=queue_name)

    assert rabbit._session is None


def test_a_batch_whose_confirmations_never_arrive_is_unknown_though_the_broker_queued_it(
    make_queue: Callable[..., RabbitMqQueue], queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker receives and queues both publishes, but its confirmations never reach the client (the
    fault proxy swallows what the broker sends): the batch times out as unknown and the connection is
    dropped. The jobs were queued after all, which is why "unknown" is the only true answer."""
    monkeypatch.setattr(rabbit_queue_module, "CONFIRM_TIMEOUT", 0.5)
    proxy = FaultProxy("127.0.0.1", 5672)
    try:
        port = proxy.start()
        rabbit = make_queue(url=f"amqp://guest:guest@127.0.0.1:{port}/", heartbeat=0)
        observer = make_queue()
        rabbit.size(queue_name)  # connected and declared before the replies go missing
        proxy.set(Mute())

        with pytest.raises(PublishNotConfirmedError, match=r"did not confirm 2 publishes \(TimeoutError: .*unknown"):
            rabbit.push_many([Noop(), Noop()], queue=queue_name)

        assert rabbit._session is None
        wait_until(lambda: observer.size(queue_name) == 2, timeout=10)  # queued after all
    finally:
        proxy.close()


def test_ack_many_of_stale_receipts_only_sends_nothing(
    make_queue: Callable[..., RabbitMqQueue], queue_name: str
) -> None:
    rabbit = make_queue()
    rabbit.push(Noop(), queue=queue_name)
    held = rabbit.pop(5, [queue_name])
    assert held is not None
    rabbit.ack(held)

    results = rabbit.ack_many([held])

    assert isinstance(results[0], StaleJobHandleError) and "already settled" in str(results[0])
    with pytest.raises(InvalidQueueArgumentError, match="not delivered by a RabbitMQ queue"):
        rabbit.ack_many([replace(held, handle=None)])


def test_an_interrupt_during_ack_many_drops_the_connection(
    rabbit: RabbitMqQueue, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rabbit.push(Records("interrupted"), queue=queue_name)
    held = rabbit.pop(5, [queue_name])
    assert held is not None and rabbit._session is not None

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise JobTimeoutInterrupt

    monkeypatch.setattr(rabbit._session.deliveries, "basic_ack", interrupted)
    with pytest.raises(JobTimeoutInterrupt):
        rabbit.ack_many([held])
    monkeypatch.undo()

    assert rabbit._session is None
    again = rabbit.pop(10, [queue_name])
    assert again is not None and again.id == held.id
    rabbit.ack(again)


def test_unreserve_forgets_old_ids_past_its_limit(
    rabbit: RabbitMqQueue, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ids given back are bounded; a forgotten one is only moved behind when it comes back."""
    monkeypatch.setattr(rabbit_queue_module, "GIVEN_BACK_LIMIT", 1)
    rabbit.push_many([Records("a"), Records("b")], queue=queue_name)
    held = _drain_all(rabbit, queue_name, 2, limit=2)

    rabbit.unreserve(held[0])
    rabbit.unreserve(held[1])

    session = rabbit._session
    assert session is not None and session.given_back == {held[1].id}
    back = _drain_all(rabbit, queue_name, 2, limit=2)
    assert sorted((job.id, job.attempts) for job in back) == sorted((job.id, 1) for job in held)
    assert rabbit.ack_many(back) == [None, None]


def test_a_redelivery_that_cannot_be_moved_behind_is_delivered_in_place(
    make_queue: Callable[..., RabbitMqQueue], queue_name: str
) -> None:
    """Moving a broker redelivery behind is a publish; when the broker refuses it (a full queue nacks it), the
    job is handed out where it is, attempts unchanged, instead of staying held by a connection that will
    never hand it out."""
    ctl = shutil.which("rabbitmqctl")
    if ctl is None:
        pytest.skip("rabbitmqctl is not available to set a queue-length policy")
    worker, other = make_queue(), make_queue()
    job_id = worker.push(Records("stuck"), queue=queue_name)
    held = worker.pop_many(5, [queue_name], 1).jobs
    assert [job.id for job in held] == [job_id]
    name = f"kinetis-test-{queue_name}"
    policy = json.dumps({"max-length": 0, "overflow": "reject-publish"})
    done = subprocess.run(
        [ctl, "-q", "set_policy", "--apply-to", "queues", name, f"^{queue_name}$", policy],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"rabbitmqctl set_policy failed: {done.stderr.strip()}")
    try:
        worker.dispose()  # the broker requeues the delivery, marked redelivered
        again = other.pop_many(10, [queue_name], 1).jobs
    finally:
        subprocess.run([ctl, "-q", "clear_policy", name], capture_output=True, timeout=60, check=False)

    assert [(job.id, job.attempts) for job in again] == [(job_id, 1)]
    assert other.ack_many(again) == [None]


def test_a_crash_redelivery_whose_move_behind_goes_unconfirmed_raises_and_nothing_is_lost(
    make_queue: Callable[..., RabbitMqQueue],
    janitor: set[str],
    queue_name: str,
    raw: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A sweep meets a buffered crash redelivery and moves it behind the queue (publish a copy, then ack), but the
    network goes silent: the copy is never confirmed, so the connection is dropped and the sweep raises
    PublishNotConfirmedError instead of handing the delivery out. The broker requeues what that connection
    held (the redelivery, and the job handed out before): each comes back once, with its attempt count."""
    high, low = f"{queue_name}-hi", queue_name
    janitor.add(high)
    monkeypatch.setattr(rabbit_queue_module, "CONFIRM_TIMEOUT", 0.5)
    crashed, other = make_queue(), make_queue()
    proxy = FaultProxy("127.0.0.1", 5672)
    try:
        port = proxy.start()
        rabbit = make_queue(url=f"amqp://guest:guest@127.0.0.1:{port}/", heartbeat=0)
        crashed_id = crashed.push(Records("crashed"), queue=low, max_attempts=3)
        assert crashed.pop(5, [low]) is not None  # held by a worker that is about to die
        rabbit.pop_many(0.1, [high, low], 4)  # starts both consumers on queues with nothing ready
        first_id = rabbit.push(Records("first"), queue=high)
        _drop_connection(crashed)  # the broker requeues its delivery, marked redelivered, to our consumer
        wait_until(lambda: rabbit.size(high) == 1 and rabbit.size(low) == 1, timeout=10)
        session = rabbit._session
        assert session is not None and session.buffers[low][0].delivery_info["redelivered"]
        [first] = rabbit.pop_many(5, [high, low], 1).jobs  # the high job; the redelivery stays buffered
        assert first.id == first_id

        proxy.set(Blackhole())
        with pytest.raises(PublishNotConfirmedError, match="unknown"):
            rabbit.pop_many(5, [high, low], 1)

        assert rabbit._session is None and session.closed
        proxy.set(Pass())
        wait_until(lambda: _ready(raw, high) == 1 and _ready(raw, low) == 1, timeout=10)
        back = [job for job in (other.pop(5, [high]), other.pop(5, [low])) if job is not None]
        assert {job.id: job.attempts for job in back} == {first_id: 1, crashed_id: 1}
        assert _ready(raw, high) == 0 and _ready(raw, low) == 0  # no copy was queued
        assert other.ack_many(back) == [None, None]
    finally:
        proxy.close()


def test_the_leak_ledger_charges_a_declared_queue_to_its_test_until_deleted(
    janitor: set[str], queue_name: str, request: pytest.FixtureRequest
) -> None:
    """Issue 28's RabbitMQ check (tests/support/rabbitmq_leaks.py): a queue declared in the test process is
    charged to the running test, and delete() discharges it, so a teardown that leaves it fails the test."""
    from tests.support.rabbitmq_leaks import _LEDGER

    rabbit = RabbitMqQueue(url=RABBITMQ_URL)
    try:
        rabbit.push(Noop(), queue=queue_name, delay=1)  # the queue and its ladder's first tier
        assert _LEDGER.open.get(queue_name) == request.node.nodeid
        assert _LEDGER.names[queue_name] == request.node.nodeid  # for the session-end listing
        rabbit.delete(queue_name)
        assert queue_name not in _LEDGER.open
        assert not rabbit.queue_known(queue_name)  # gone from the broker: queue_known() declares nothing
    finally:
        rabbit.dispose()
