"""Redis backend: what the conformance suite cannot see (key layout, batch limits, lease clock, fences, settings).

Every test runs on the machine's Redis under a key prefix of its own, deleted afterwards.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from django.test import override_settings

from kinetis_queue import conf, connections
from kinetis_queue.backends.redis import RedisHandle, RedisQueue
from kinetis_queue.backends.redis.queue import DELAYED_PROMOTION_BATCH_SIZE, LEASE_RECLAIM_BATCH_SIZE
from kinetis_queue.conf.checks import check_settings
from kinetis_queue.contracts import JobSettlement, QueuedJob
from kinetis_queue.exceptions import (
    InvalidQueueArgumentError,
    MalformedJobSettledError,
    QueueConfigurationError,
    StaleJobHandleError,
)
from tests.jobs import Noop, Records
from tests.settings import REDIS_URL
from tests.support.helpers import wait_until

ROOT = Path(__file__).resolve().parents[2]
LUA_DIR = ROOT / "kinetis_queue" / "backends" / "redis"
ENVELOPE_KEYS = {"id", "pushedAt", "class", "args", "attempts", "maxAttempts", "metadata"}

MakeQueue = Callable[..., RedisQueue]


@pytest.fixture
def server() -> Iterator[redis.Redis]:
    """A plain client on the machine's Redis, to look at the keys from outside the queue."""
    client = redis.Redis.from_url(REDIS_URL)
    yield client
    client.close()


@pytest.fixture
def prefix(server: redis.Redis) -> Iterator[str]:
    """A key prefix no other test uses; every key under it is deleted afterwards."""
    value = f"kinetis_test_{uuid.uuid4().hex[:12]}:"
    yield value
    stale = list(server.scan_iter(match=f"{value}*", count=1000))
    if stale:
        server.delete(*stale)


@pytest.fixture
def make_queue(prefix: str) -> Iterator[MakeQueue]:
    """Build RedisQueues on the test's prefix; they are disposed afterwards."""
    built: list[RedisQueue] = []

    def make(**kwargs: Any) -> RedisQueue:
        queue = RedisQueue(**{"url": REDIS_URL, "prefix": prefix, "visibility_timeout": 30, **kwargs})
        built.append(queue)
        return queue

    yield make
    for queue in built:
        queue.dispose()


@pytest.fixture
def queue(make_queue: MakeQueue) -> RedisQueue:
    return make_queue()


def snapshot(server: redis.Redis, queue: RedisQueue, name: str) -> dict[str, bytes | None]:
    """The three keys of ``name``, serialized byte for byte (DUMP)."""
    return {key: server.dump(key) for key in queue.keys(name)}


# -- key layout ---------------------------------------------------------------------------------


def test_keys_are_prefixed_per_queue_with_the_spec_names(queue: RedisQueue, prefix: str, queue_name: str) -> None:
    """Contract: Backend mechanisms: Redis (kinetis_queue:{queue}:pending, :delayed, :leased)."""
    base = f"{prefix}kinetis_queue:{queue_name}:"
    assert tuple(queue.keys(queue_name)) == (base + "pending", base + "delayed", base + "leased")


def test_a_push_stores_the_full_envelope_on_pending(queue: RedisQueue, server: redis.Redis, queue_name: str) -> None:
    """Contract: Backend mechanisms: Redis (members are the JSON envelope with all seven fields, a 32-hex id)."""
    job_id = queue.push(Records("stored", [1, 2]), queue=queue_name, max_attempts=4)

    (member,) = server.lrange(queue.keys(queue_name).pending, 0, -1)
    envelope = json.loads(member)
    assert set(envelope) == ENVELOPE_KEYS
    assert envelope["id"] == job_id and re.fullmatch(r"[0-9a-f]{32}", job_id)
    assert envelope["class"] == "tests.jobs.Records"
    assert envelope["args"] == {"label": "stored", "items": [1, 2], "color": None, "when": None}
    assert (envelope["attempts"], envelope["maxAttempts"], envelope["metadata"]) == (0, 4, {})
    assert server.exists(queue.keys(queue_name).delayed, queue.keys(queue_name).leased) == 0


def test_a_delayed_push_is_scored_by_the_pushing_clock(queue: RedisQueue, server: redis.Redis, queue_name: str) -> None:
    """Contract: Delayed jobs (scored in the delayed set with the pushing process's clock)."""
    queue.push(Noop(), delay=120, queue=queue_name)

    ((member, score),) = server.zrange(queue.keys(queue_name).delayed, 0, -1, withscores=True)
    assert score == pytest.approx(json.loads(member)["pushedAt"] + 120)
    assert server.llen(queue.keys(queue_name).pending) == 0


def test_the_leased_member_is_the_handle_scored_by_redis_time(
    queue: RedisQueue, server: redis.Redis, queue_name: str
) -> None:
    """Contract: Backend mechanisms: Redis (reserve: pending tail -> leased at Redis TIME + visibility timeout)."""
    queue.push(Noop(), queue=queue_name)
    before = _redis_time(server)
    job = queue.pop(5, [queue_name])
    after = _redis_time(server)

    assert job is not None and isinstance(job.handle, RedisHandle)
    ((member, expiry),) = server.zrange(queue.keys(queue_name).leased, 0, -1, withscores=True)
    assert member.decode() == job.handle.member
    assert before + 30 <= expiry <= after + 30
    assert server.llen(queue.keys(queue_name).pending) == 0


def _redis_time(server: redis.Redis) -> float:
    seconds, micros = server.time()
    return seconds + micros / 1_000_000


# -- the lease clock ------------------------------------------------------------------------------

SKEWED_POP = """
import json, sys, time
import django
django.setup()
from kinetis_queue.backends.redis import RedisQueue
url, prefix, queue = sys.argv[1:4]
q = RedisQueue(url=url, prefix=prefix, visibility_timeout=30)
job = q.pop(1.5, [queue])
if job is not None:
    q.ack(job)
print(json.dumps({"popped": job and job.id, "clock": time.time()}))
"""


def test_a_worker_with_a_skewed_clock_does_not_reclaim_live_leases(
    queue: RedisQueue, server: redis.Redis, prefix: str, queue_name: str
) -> None:
    """Contract: Backend mechanisms: Redis (lease expiry uses Redis TIME, so every worker shares one lease
    clock; delayed jobs are promoted against the popping worker's clock)."""
    leased_id = queue.push(Records("live lease"), queue=queue_name)
    held = queue.pop(5, [queue_name])
    assert held is not None and held.id == leased_id
    delayed_id = queue.push(Records("due in 10 minutes"), delay=600, queue=queue_name)

    # A worker whose clock runs an hour ahead (libfaketime): by its clock the 30 s lease expired
    # long ago, and the delayed job is due.
    if shutil.which("faketime") is None:
        pytest.fail("faketime is not installed: bash scripts/system-deps.sh installs it", pytrace=False)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
        "KINETIS_TESTS_SUBPROCESS": "1",
        "DONT_FAKE_MONOTONIC": "1",
    }
    done = subprocess.run(
        ["faketime", "-f", "+1h", sys.executable, "-c", SKEWED_POP, REDIS_URL, prefix, queue_name],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])

    assert result["clock"] - time.time() > 3000  # the skew took effect in the worker
    assert result["popped"] == delayed_id  # promoted by its clock (the spec's rule for delays) ...
    leased = server.zrange(queue.keys(queue_name).leased, 0, -1)
    assert [m.decode() for m in leased] == [held.handle.member]  # ... while the live lease was left alone
    queue.ack(held)
    assert queue.size(queue_name) == 0


# -- batches of 100 per sweep -------------------------------------------------------------------


def test_250_due_delayed_jobs_are_promoted_across_three_sweeps(
    queue: RedisQueue, server: redis.Redis, queue_name: str
) -> None:
    """Contract: Backend mechanisms: Redis (promotion moves at most 100 envelopes per sweep)."""
    assert DELAYED_PROMOTION_BATCH_SIZE == 100
    for _ in range(250):
        queue.push(Noop(), delay=0.05, queue=queue_name)
    keys = queue.keys(queue_name)
    ((_, last_due),) = server.zrange(keys.delayed, -1, -1, withscores=True)
    wait_until(lambda: time.time() > last_due)  # all 250 are due by this process's clock

    seen = []
    for _ in range(3):
        assert queue.pop(5, [queue_name]) is not None  # a job was waiting, so this was one sweep
        seen.append((server.zcard(keys.delayed), server.llen(keys.pending), server.zcard(keys.leased)))

    assert seen == [(150, 99, 1), (50, 198, 2), (0, 247, 3)]
    assert queue.size(queue_name) == 247


def test_150_expired_leases_are_reclaimed_across_two_sweeps(
    make_queue: MakeQueue, server: redis.Redis, queue_name: str
) -> None:
    """Contract: Backend mechanisms: Redis (reclaim moves at most 100 envelopes per sweep)."""
    assert LEASE_RECLAIM_BATCH_SIZE == 100
    queue = make_queue(visibility_timeout=1)
    for _ in range(150):
        queue.push(Noop(), queue=queue_name)
    crashed = [queue.pop(5, [queue_name]) for _ in range(150)]
    assert all(job is not None for job in crashed)
    wait_until(lambda: queue.size(queue_name) == 150, timeout=10)  # every lease has expired
    keys = queue.keys(queue_name)

    first = queue.pop(5, [queue_name])
    after_first = (server.llen(keys.pending), server.zcard(keys.leased))
    second = queue.pop(5, [queue_name])
    after_second = (server.llen(keys.pending), server.zcard(keys.leased))

    assert first is not None and second is not None
    assert (first.attempts, second.attempts) == (2, 2)
    assert after_first == (99, 51)  # 100 reclaimed, one of them reserved; 50 still expired
    assert after_second == (148, 2)  # the other 50 reclaimed, one more reserved


def test_of_two_sweepers_reclaiming_one_lease_only_one_writes(
    make_queue: MakeQueue, server: redis.Redis, queue_name: str
) -> None:
    """Contract: Backend mechanisms: Redis (two sweepers racing produce one winner; the loser writes nothing)."""
    queue, other = make_queue(visibility_timeout=1), make_queue(visibility_timeout=1)
    queue.push(Noop(), queue=queue_name)
    job = queue.pop(5, [queue_name])
    assert job is not None
    wait_until(lambda: queue.size(queue_name) == 1, timeout=10)
    keys = queue.keys(queue_name)
    expired = [job.handle.member.encode()]

    # Both sweepers found the same expired lease; each applies its reclaim.
    assert queue._reclaim(queue_name, keys, expired) == 1
    state = snapshot(server, queue, queue_name)
    assert other._reclaim(queue_name, keys, expired) == 0

    assert snapshot(server, queue, queue_name) == state
    assert server.llen(keys.pending) == 1


# -- fenced settlements --------------------------------------------------------------------------

SETTLE: dict[JobSettlement, Callable[[RedisQueue, QueuedJob], None]] = {
    JobSettlement.ACK: lambda queue, job: queue.ack(job),
    JobSettlement.RELEASE: lambda queue, job: queue.release(job, 5),
    JobSettlement.FAIL: lambda queue, job: queue.fail(job),
    JobSettlement.UNRESERVE: lambda queue, job: queue.unreserve(job),
}


@pytest.mark.parametrize("operation", list(SETTLE), ids=[op.value for op in SETTLE])
def test_a_stale_settlement_raises_and_leaves_the_keys_byte_for_byte_unchanged(
    make_queue: MakeQueue, server: redis.Redis, queue_name: str, operation: JobSettlement
) -> None:
    """Contract: Delivery receipts and stale settlements (a reclaimed delivery's settlement writes nothing)."""
    queue = make_queue(visibility_timeout=1)
    queue.push(Records("reclaimed"), queue=queue_name)
    first = queue.pop(5, [queue_name])
    second = queue.pop(10, [queue_name])  # reclaims the expired lease
    assert first is not None and second is not None and second.attempts == 2
    queue.push(Records("waiting"), queue=queue_name)
    queue.push(Records("delayed"), delay=600, queue=queue_name)
    before = snapshot(server, queue, queue_name)
    assert all(before.values())

    with pytest.raises(StaleJobHandleError) as raised:
        SETTLE[operation](queue, first)

    assert raised.value.operation is operation
    assert snapshot(server, queue, queue_name) == before
    queue.ack(second)


def test_a_settlement_from_another_backend_is_refused_before_any_io(queue: RedisQueue, queue_name: str) -> None:
    foreign = QueuedJob("0" * 32, queue_name, "tests.jobs.Noop", {}, 1, None, datetime.now(UTC), handle=("row", 1))
    with pytest.raises(ValueError, match="not delivered by a Redis queue"):
        queue.ack(foreign)


def test_a_forged_handle_writes_nothing(queue: RedisQueue, server: redis.Redis, queue_name: str) -> None:
    """A receipt pop() never handed out: release() refuses it before any I/O, ack() and fail() find nothing."""
    queue.push(Noop(), queue=queue_name)
    live = queue.pop(5, [queue_name])
    assert live is not None
    before = snapshot(server, queue, queue_name)
    forged = dataclasses.replace(live, handle=RedisHandle(live.handle.member.upper()))

    with pytest.raises(InvalidQueueArgumentError):
        queue.release(forged)
    with pytest.raises(StaleJobHandleError):
        queue.ack(forged)
    with pytest.raises(StaleJobHandleError):
        queue.fail(forged)

    assert snapshot(server, queue, queue_name) == before
    queue.ack(live)


def test_renewal_moves_the_expiry_by_redis_time(queue: RedisQueue, server: redis.Redis, queue_name: str) -> None:
    """Contract: Reservation renewal (Redis TIME plus the window, ZADD ... XX)."""
    queue.push(Noop(), queue=queue_name)
    job = queue.pop(5, [queue_name])
    assert job is not None
    leased = queue.keys(queue_name).leased
    first_expiry = server.zscore(leased, job.handle.member)
    wait_until(lambda: _redis_time(server) > first_expiry - 30 + 0.05)

    before = _redis_time(server)
    queue.renew(job)
    after = _redis_time(server)

    expiry = server.zscore(leased, job.handle.member)
    assert expiry is not None and first_expiry < expiry
    assert before + 30 <= expiry <= after + 30
    assert server.zcard(leased) == 1


# -- malformed members ---------------------------------------------------------------------------


def _envelope(**fields: Any) -> dict[str, Any]:
    base = {
        "id": uuid.uuid4().hex,
        "pushedAt": 1.5,
        "class": "tests.jobs.Noop",
        "args": {},
        "attempts": 0,
        "maxAttempts": None,
        "metadata": {},
    }
    return {**base, **fields}


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


MALFORMED = [
    pytest.param(b"not json", id="not-json"),
    pytest.param(b"", id="empty"),
    pytest.param(b"\xff\xfe{}", id="not-utf8"),
    pytest.param(b'{"id": NaN}', id="nan"),
    pytest.param(_json(["a", "list"]), id="not-an-object"),
    pytest.param(_json({k: v for k, v in _envelope().items() if k != "metadata"}), id="missing-metadata"),
    pytest.param(_json({**_envelope(), "queue": "x"}), id="extra-key"),
    pytest.param(_json(_envelope())[:-1] + b',"attempts":1}', id="duplicate-key"),
    pytest.param(_json(_envelope(id="A" * 32)), id="id-uppercase"),
    pytest.param(_json(_envelope(id="0" * 31)), id="id-31-chars"),
    pytest.param(_json(_envelope(attempts=-1)), id="attempts-negative"),
    pytest.param(_json(_envelope(maxAttempts="3")), id="max-attempts-string"),
    pytest.param(_json(_envelope(args=[])), id="args-list"),
    pytest.param(b'{"id":"' + b"0" * 32 + b'","args":{"x":' + b"[" * 40 + b"]" * 40 + b"}}", id="args-nested-40-deep"),
    pytest.param(_json(_envelope(pushedAt=-1)), id="pushed-at-negative"),
    pytest.param(_json(_envelope(**{"class": ""})), id="class-empty"),
]


@pytest.mark.parametrize("member", MALFORMED)
def test_a_malformed_member_is_removed_on_the_pop_path(
    queue: RedisQueue, server: redis.Redis, queue_name: str, member: bytes
) -> None:
    """Contract: Malformed stored messages (reserve, fail to decode, ZREM the exact leased envelope)."""
    healthy = queue.push(Records("healthy"), queue=queue_name)
    keys = queue.keys(queue_name)
    server.rpush(keys.pending, member)  # the tail: reserved before the healthy job

    with pytest.raises(MalformedJobSettledError):
        queue.pop(5, [queue_name])

    assert server.zscore(keys.leased, member) is None
    assert member not in server.lrange(keys.pending, 0, -1)
    delivered = queue.pop(5, [queue_name])
    assert delivered is not None and (delivered.id, delivered.attempts) == (healthy, 1)
    queue.ack(delivered)
    assert server.exists(*keys) == 0


@pytest.mark.parametrize("member", MALFORMED[:3] + MALFORMED[5:6])
def test_a_malformed_expired_lease_is_removed_on_the_reclaim_path(
    queue: RedisQueue, server: redis.Redis, queue_name: str, member: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    """Contract: Backend mechanisms: Redis (an expired envelope that no longer decodes is removed as malformed
    on the reclaim path too, rather than swept on every pop())."""
    keys = queue.keys(queue_name)
    crashed = _envelope(args={"label": "secret-label"}, **{"class": "tests.jobs.Records"})
    past = _redis_time(server) - 60
    server.zadd(keys.leased, {member: past, _json(crashed): past})

    with caplog.at_level(logging.WARNING, logger="kinetis_queue.redis"):
        job = queue.pop(5, [queue_name])

    assert job is not None and (job.id, job.attempts) == (crashed["id"], 2)  # the valid one was reclaimed
    assert server.zscore(keys.leased, member) is None
    assert server.zcard(keys.leased) == 1  # only the new delivery's lease
    assert server.llen(keys.pending) == 0
    (record,) = [r for r in caplog.records if r.name == "kinetis_queue.redis"]
    assert "malformed" in record.getMessage() and queue_name in record.getMessage()
    assert queue.pop(0.01, [queue_name]) is None  # not found again by the next sweep


# -- size and clear ------------------------------------------------------------------------------


def test_size_counts_pending_delayed_and_expired_leases_in_one_script(
    make_queue: MakeQueue, server: redis.Redis, queue_name: str
) -> None:
    """Contract: Waiting counts and clearing (pending, delayed and expired leases; a live lease is not waiting)."""
    queue = make_queue()
    keys = queue.keys(queue_name)
    queue.push(Noop(), queue=queue_name)
    queue.push(Noop(), delay=600, queue=queue_name)
    now = _redis_time(server)
    server.zadd(keys.leased, {_json(_envelope()): now - 1, _json(_envelope()): now + 600})

    assert queue.size(queue_name) == 3
    assert queue.clear(queue_name) == 2
    assert server.zcard(keys.leased) == 2  # clear() never touches leases, expired or live
    assert server.exists(keys.pending, keys.delayed) == 0
    assert queue.size(queue_name) == 1


def test_a_prefix_keeps_two_applications_apart(make_queue: MakeQueue, prefix: str, queue_name: str) -> None:
    """The PREFIX option: two applications can share one Redis."""
    ours, theirs = make_queue(), make_queue(prefix=prefix + "other:")
    ours.push(Noop(), queue=queue_name)

    assert theirs.size(queue_name) == 0
    assert theirs.pop(0.01, [queue_name]) is None
    assert ours.size(queue_name) == 1


# -- the scripts ---------------------------------------------------------------------------------


def _lua_files() -> list[Path]:
    return sorted(LUA_DIR.glob("*.lua"))


def test_every_script_has_the_header_and_touches_only_keys_it_is_given() -> None:
    """DESIGN notes: every key passes through KEYS[]; the KEYS command is never called (Dramatiq #491, #682)."""
    names = [path.stem for path in _lua_files()]
    assert names == [
        "ack_many",
        "acquire_slot",
        "clear",
        "priority",
        "push_many",
        "push_unique",
        "reclaim",
        "relay_push",
        "release",
        "release_unique",
        "renew",
        "renew_slot",
        "size",
        "stats",
        "sweep",
        "take_rate",
        "unique_push",
        "unreserve",
    ]
    for path in _lua_files():
        text = path.read_text()
        library = path.stem in ("priority", "unique_push")
        assert text.startswith(f"-- {path.stem}: "), path.name
        assert library or ("-- KEYS[1] = " in text and "-- Returns" in text), path.name
        calls = re.findall(r"redis\.call\('(\w+)'(?:, ([^,)]+))?", text)
        assert calls or "push_unique(KEYS[" in text or "store_envelope(KEYS[" in text, path.name
        # priority.lua and unique_push.lua are the libraries scripts.py puts before the scripts that store jobs:
        # their functions take their keys as arguments (``*_key``), which every caller passes from KEYS.
        for command, first in calls:
            assert command != "KEYS", path.name
            key = first.endswith("_key") if library else first.startswith("KEYS[")
            assert command == "TIME" or key, f"{path.name}: {command} {first}"
        for call in re.findall(r"(?:make_ready|priority_score|push_unique|store_envelope)\(([^)]*)\)", text):
            if not library:
                assert call.startswith("KEYS["), f"{path.name}: {call}"


def test_queue_settings_are_read_from_the_connection_entry(prefix: str) -> None:
    entry = {"BACKEND": "redis", "URL": REDIS_URL, "PREFIX": prefix, "SOCKET_TIMEOUT": 2, "VISIBILITY_TIMEOUT": 7}
    with override_settings(KINETIS_QUEUE={"CONNECTIONS": {"default": entry}}):
        built = connections.build()
    assert isinstance(built, RedisQueue)
    assert (built.prefix, built.visibility_timeout()) == (prefix, 7)
    built.dispose()
    built.dispose()  # idempotent, and safe before any I/O


# -- configuration -------------------------------------------------------------------------------


def _load(entry: dict[str, Any], caches: dict[str, Any] | None = None) -> conf.QueueSettings:
    extra = {"CACHES": caches} if caches is not None else {}
    setting = {"DEFAULT_CONNECTION": "fast", "CONNECTIONS": {"fast": {"BACKEND": "redis", **entry}}}
    with override_settings(KINETIS_QUEUE=setting, **extra):
        return conf.load()


@pytest.mark.parametrize(
    ("entry", "caches", "named"),
    [
        ({"URL": REDIS_URL, "CLUSTER": True}, None, "KINETIS_QUEUE['CONNECTIONS']['fast']['CLUSTER']"),
        ({"URL": REDIS_URL, "CLUSTER": "yes"}, None, "KINETIS_QUEUE['CONNECTIONS']['fast']['CLUSTER']"),
        ({}, None, "KINETIS_QUEUE['CONNECTIONS']['fast']['URL']"),
        ({"URL": REDIS_URL, "CACHE": "default"}, None, "KINETIS_QUEUE['CONNECTIONS']['fast']['URL']"),
        ({"URL": "http://127.0.0.1:6379"}, None, "KINETIS_QUEUE['CONNECTIONS']['fast']['URL']"),
        ({"URL": 6379}, None, "KINETIS_QUEUE['CONNECTIONS']['fast']['URL']"),
        ({"URL": REDIS_URL, "PREFIX": 3}, None, "KINETIS_QUEUE['CONNECTIONS']['fast']['PREFIX']"),
        ({"URL": REDIS_URL, "SOCKET_TIMEOUT": 0}, None, "KINETIS_QUEUE['CONNECTIONS']['fast']['SOCKET_TIMEOUT']"),
        ({"URL": REDIS_URL, "HOST": "x"}, None, "KINETIS_QUEUE['CONNECTIONS']['fast']['HOST']"),
        ({"CACHE": "nope"}, None, "KINETIS_QUEUE['CONNECTIONS']['fast']['CACHE']"),
        (
            {"CACHE": "local"},
            {"local": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}},
            "KINETIS_QUEUE['CONNECTIONS']['fast']['CACHE']",
        ),
        (
            {"CACHE": "r"},
            {"r": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": "h:1"}},
            "CACHES['r']['LOCATION']",
        ),
        (
            {"CACHE": "r"},
            {
                "r": {
                    "BACKEND": "django_redis.cache.RedisCache",
                    "LOCATION": REDIS_URL,
                    "OPTIONS": {"CLIENT_CLASS": "django_redis.client.ShardClient"},
                }
            },
            "CACHES['r']['OPTIONS']['CLIENT_CLASS']",
        ),
    ],
    ids=[
        "cluster",
        "cluster-truthy",
        "no-url-or-cache",
        "url-and-cache",
        "url-scheme",
        "url-type",
        "prefix-type",
        "socket-timeout-zero",
        "unknown-key",
        "cache-unknown-alias",
        "cache-not-redis",
        "cache-location-not-a-url",
        "cache-sharded-client",
    ],
)
def test_a_bad_redis_setting_is_rejected_at_start_up_naming_the_key(
    entry: dict[str, Any], caches: dict[str, Any] | None, named: str
) -> None:
    """DESIGN.md §5: bad settings fail at start-up with a message naming the key (a cluster setting too)."""
    with pytest.raises(QueueConfigurationError) as raised:
        _load(entry, caches)
    assert named in str(raised.value)


def test_a_cluster_setting_surfaces_in_manage_py_check() -> None:
    entry = {"BACKEND": "redis", "URL": REDIS_URL, "CLUSTER": True}
    with override_settings(KINETIS_QUEUE={"CONNECTIONS": {"fast": entry}}):
        (error,) = check_settings()
    assert error.id == "kinetis_queue.E001"
    assert "['CLUSTER']" in error.msg


def test_cluster_false_is_accepted() -> None:
    assert _load({"URL": REDIS_URL, "CLUSTER": False}).connections["fast"].backend == "redis"


@pytest.mark.parametrize(
    ("cache", "db"),
    [
        # The first server of LOCATION (Django writes there); "db" from OPTIONS, as Django's own client does.
        pytest.param(
            {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": "redis://127.0.0.1:6379,redis://127.0.0.1:6380",
                "OPTIONS": {"db": 7, "socket_timeout": 3, "serializer": "x.Y", "parser_class": "x.Z"},
            },
            7,
            id="django-rediscache",
        ),
        pytest.param(
            {
                "BACKEND": "django_redis.cache.RedisCache",
                "LOCATION": ["redis://127.0.0.1:6379"],
                "OPTIONS": {"SOCKET_TIMEOUT": 3, "CONNECTION_POOL_KWARGS": {"db": 8}, "SERIALIZER": "x.Y"},
            },
            8,
            id="django-redis",
        ),
    ],
)
def test_cache_reuses_the_caches_connection_settings_on_a_connection_of_its_own(
    prefix: str, queue_name: str, cache: dict[str, Any], db: int
) -> None:
    """A CACHE connection reads the cache's LOCATION (its first, writing server) and connection OPTIONS."""
    entry = {"BACKEND": "redis", "CACHE": "jobs", "PREFIX": prefix}
    with override_settings(CACHES={"jobs": cache}, KINETIS_QUEUE={"CONNECTIONS": {"default": entry}}):
        built = connections.build()
    try:
        job_id = built.push(Noop(), queue=queue_name)
        on_db = redis.Redis.from_url(f"redis://127.0.0.1:6379/{db}")
        try:
            (member,) = on_db.lrange(built.keys(queue_name).pending, 0, -1)  # type: ignore[attr-defined]
            assert json.loads(member)["id"] == job_id
        finally:
            on_db.delete(*built.keys(queue_name))  # type: ignore[attr-defined]
            on_db.close()
    finally:
        built.dispose()
