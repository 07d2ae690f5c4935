"""The RabbitMQ backend beyond the conformance suite: the delay ladder, confirmed publishing, headers,
receipts of dropped connections, malformed messages and settings (contract: "Backend mechanisms: RabbitMQ").

Every test runs against the machine's broker with its own queue names, and deletes what it declared
(queues, ladder tiers, exchanges) when it ends.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import amqp
import pytest
from django.test import override_settings

from kinetis_queue import conf, connections
from kinetis_queue.backends.rabbitmq import RabbitMqQueue, ladder
from kinetis_queue.backends.rabbitmq.session import parse_url
from kinetis_queue.exceptions import (
    ConnectionFailedError,
    InvalidQueueArgumentError,
    MalformedJobSettledError,
    PublishNotConfirmedError,
    QueueConfigurationError,
)
from tests.jobs import Noop, Records
from tests.settings import RABBITMQ_URL
from tests.support.helpers import wait_until

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


def _exists(raw_connection_host: str, name: str) -> bool:
    connection = amqp.Connection(host=raw_connection_host)
    connection.connect()
    try:
        connection.channel().queue_declare(name, passive=True)
        return True
    except amqp.exceptions.NotFound:
        return False
    finally:
        connection.close()


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
    assert not _exists(BROKER, ladder.holding_queue(queue_name, 3))

    # size() declares the whole ladder, since a job parked by another process can be in any tier.
    assert rabbit.size(queue_name) == 1
    assert _exists(BROKER, ladder.holding_queue(queue_name, 21))


def test_every_tier_lives_without_x_expires_behind_its_exchange(
    rabbit: RabbitMqQueue, queue_name: str, raw: Any
) -> None:
    """RELIABILITY.md §3 D5: no tier of the ladder can expire (a queue with ``x-expires`` is deleted once
    unused, with the delayed jobs in it), and every tier's dead-letter exchange exists.

    The broker refuses a redeclaration whose equivalence-checked arguments differ (406): the same
    arguments without ``x-expires`` are accepted, and the same plus ``x-expires`` are refused.
    """
    rabbit.size(queue_name)  # declares all 22 tiers
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
    """Contract: Counting and clearing (size() sums the real queue and all 22 tiers; clear() purges them all)."""
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

    assert not _exists(BROKER, queue_name)
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
