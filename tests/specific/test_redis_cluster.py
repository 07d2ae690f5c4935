"""Issue 20: the redis backend's Cluster and Sentinel settings, and what a cluster changes (docs/backends/redis.md).

The conformance suite runs on the redis-cluster row (tests/support/backends.py) and the failover scenario is
tests/faults/test_redis_failover.py; here: the settings, the key layout (one hash tag per queue), queue
listing across the masters, and the batches that span queues.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings
from redis.crc import key_slot

from kinetis_queue import conf
from kinetis_queue import connections as queue_connections
from kinetis_queue.backends.redis import RedisQueue
from kinetis_queue.exceptions import QueueConfigurationError
from tests.jobs import Noop

PATH = "KINETIS_QUEUE['CONNECTIONS']['fast']"
NODES = ["redis://127.0.0.1:7000", "redis://127.0.0.1:7001"]
SENTINELS = ["redis://127.0.0.1:26379"]


def _load(entry: dict[str, Any]) -> conf.QueueSettings:
    setting = {"DEFAULT_CONNECTION": "fast", "CONNECTIONS": {"fast": {"BACKEND": "redis", **entry}}}
    with override_settings(KINETIS_QUEUE=setting):
        return conf.load()


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        ({"CLUSTER_NODES": []}, "['CLUSTER_NODES']"),
        ({"CLUSTER_NODES": "redis://127.0.0.1:7000"}, "['CLUSTER_NODES']"),
        ({"CLUSTER_NODES": ["http://127.0.0.1:7000"]}, "['CLUSTER_NODES']['0']"),
        ({"CLUSTER_NODES": NODES, "URL": "redis://127.0.0.1:6379"}, "['URL']"),
        ({"CLUSTER_NODES": NODES, "SENTINELS": SENTINELS, "SENTINEL_SERVICE": "m"}, "['URL']"),
        ({"SENTINELS": SENTINELS}, "['SENTINEL_SERVICE']"),
        ({"SENTINELS": SENTINELS, "SENTINEL_SERVICE": ""}, "['SENTINEL_SERVICE']"),
        ({"URL": "redis://127.0.0.1:6379", "SENTINEL_SERVICE": "m"}, "['SENTINEL_SERVICE']"),
        ({"SENTINELS": [6379], "SENTINEL_SERVICE": "m"}, "['SENTINELS']['0']"),
        ({"CLUSTER_NODES": NODES, "WAIT_REPLICAS": -1}, "['WAIT_REPLICAS']"),
        ({"CLUSTER_NODES": NODES, "WAIT_REPLICAS": 1.5}, "['WAIT_REPLICAS']"),
        ({"CLUSTER_NODES": NODES, "WAIT_TIMEOUT": 0}, "['WAIT_TIMEOUT']"),
        ({"CLUSTER_NODES": NODES, "CLUSTER": True}, "['CLUSTER']"),
    ],
    ids=[
        "nodes-empty",
        "nodes-a-string",
        "nodes-scheme",
        "nodes-and-url",
        "nodes-and-sentinels",
        "sentinels-without-service",
        "service-empty",
        "service-without-sentinels",
        "sentinel-type",
        "wait-negative",
        "wait-float",
        "wait-timeout-zero",
        "cluster-switch",
    ],
)
def test_a_bad_topology_setting_is_rejected_at_start_up_naming_the_key(entry: dict[str, Any], named: str) -> None:
    with pytest.raises(QueueConfigurationError) as raised:
        _load(entry)
    assert f"{PATH}{named}" in str(raised.value)


def test_cluster_and_sentinel_settings_build_their_clients_without_io() -> None:
    cluster = _load({"CLUSTER_NODES": NODES, "WAIT_REPLICAS": 1, "WAIT_TIMEOUT": 0.5}).connections["fast"]
    sentinel = _load({"SENTINELS": SENTINELS, "SENTINEL_SERVICE": "m"}).connections["fast"]
    for settings in (cluster, sentinel):
        queue = RedisQueue.from_settings(settings)
        queue.dispose()
    assert RedisQueue.from_settings(cluster).cluster is True
    assert RedisQueue.from_settings(sentinel).cluster is False


def test_every_key_of_a_cluster_queue_is_in_one_slot_and_a_standalone_layout_is_unchanged() -> None:
    """Hash tags only on a cluster: a standalone server's keys stay where earlier versions put them."""
    clustered = RedisQueue(cluster_nodes=NODES, prefix="app:")
    plain = RedisQueue(prefix="app:")
    try:
        keys = clustered.all_keys("emails")
        assert keys[0] == "app:kinetis_queue:{emails}:pending"
        assert len({key_slot(key.encode()) for key in keys}) == 1
        assert clustered.lock_store().key("k", "emails").startswith("app:kinetis_queue:{emails}:")
        assert plain.keys("emails").pending == "app:kinetis_queue:emails:pending"
        assert plain.lock_store().key("k", "emails") == "app:kinetis_queue:unique:k"
    finally:
        clustered.dispose()
        plain.dispose()


@pytest.fixture
def cluster_queue(redis_cluster: Any) -> Any:
    queue = queue_connections.build("rediscluster")
    yield queue
    queue.dispose()


def test_queues_on_every_master_are_listed(redis_cluster: Any, cluster_queue: Any, queue_name: str) -> None:
    names = [f"{queue_name}{n}" for n in range(12)]
    masters = {cluster_queue._client.node_for(cluster_queue.keys(name).pending) for name in names}
    assert len(masters) > 1  # 12 names over 3 masters: spread (a collision on one master has odds 3 ** -11)
    for name in names:
        cluster_queue.push(Noop(), queue=name)
    assert set(names) <= set(cluster_queue.queue_names())


def test_a_batch_over_several_queues_is_stored_and_acked_per_queue(
    redis_cluster: Any, cluster_queue: Any, queue_name: str
) -> None:
    names = [f"{queue_name}a", f"{queue_name}b", f"{queue_name}c"]
    ids = cluster_queue.send_many([cluster_queue.prepare(Noop(), 0, name, None) for name in names * 2])
    assert len(ids) == 6 and [cluster_queue.size(name) for name in names] == [2, 2, 2]
    jobs = [job for name in names for job in cluster_queue.pop_many(1, [name], 2).jobs]
    assert len(jobs) == 6
    assert cluster_queue.ack_many(jobs[::-1]) == [None] * 6
    assert [cluster_queue.size(name) for name in names] == [0, 0, 0]


def test_a_moved_reply_is_followed_once_to_the_master_it_names(
    redis_cluster: Any, cluster_queue: Any, queue_name: str
) -> None:
    """MOVED means the command was refused: sent again to the named master (a stale map after a failover)."""
    client = cluster_queue._client
    pending = cluster_queue.keys(queue_name).pending
    right = client.node_for(pending)
    wrong = next(node for node in client.masters() if node is not right)
    assert client._slots is not None
    client._slots[key_slot(pending.encode())] = wrong  # as if the map predated a failover
    cluster_queue.push(Noop(), queue=queue_name)
    assert cluster_queue.size(queue_name) == 1  # stored once, on the right master
    assert client.node_for(pending) is right  # the map was read again


def test_a_push_that_no_replica_confirmed_is_reported_unknown_never_acknowledged(queue_name: str) -> None:
    """WAIT_REPLICAS on a server without replicas (the shared standalone one): the push is on the server,
    and push() raises OutcomeUnknownError instead of returning."""
    from django.conf import settings

    from kinetis_queue.exceptions import OutcomeUnknownError

    queue = RedisQueue(url=settings.REDIS_URL, prefix=settings.REDIS_PREFIX, wait_replicas=1, wait_timeout=0.05)
    try:
        with pytest.raises(OutcomeUnknownError, match="reached 0 of 1 replica"):
            queue.push(Noop(), queue=queue_name)
        assert queue.size(queue_name) == 1
        job = queue.pop(1, [queue_name])
        assert job is not None
        queue.ack(job)  # settlements never wait
    finally:
        queue.dispose()
