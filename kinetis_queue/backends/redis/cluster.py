"""The queue's client for a Redis Cluster: each command goes to the master of its key's slot.

Built on RedisClient (one per master, so each keeps its never-re-sent rule, client.py) and a slot map
read with ``CLUSTER SLOTS`` from the start nodes or any master already known. Every key of one queue
carries the queue's hash tag (RedisQueue.keys()), so each script names keys of one slot and runs whole
on one master. redis-py's RedisCluster is not used: it re-sends a command on a connection error, which
can push or reserve a job twice when only the reply was lost (DESIGN.md §7).

Redirects: a ``MOVED`` or ``ASK`` reply, or ``CLUSTERDOWN`` / ``TRYAGAIN``, means the command was refused
and nothing was applied, so a ``MOVED`` is followed once after re-reading the map (a failover or a
resharding moved the slot), and the others raise ConnectionFailedError. A transport failure is raised as
it came (ConnectionFailedError or OutcomeUnknownError) and marks the map stale, so the next command reads
it again and reaches the new master after a failover.
"""

from __future__ import annotations

import select
import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import redis
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot
from redis.exceptions import AskError, ClusterDownError, MovedError, TryAgainError

from kinetis_queue.backends.redis.client import Connection, RedisClient, _Errors
from kinetis_queue.backends.redis.scripts import Script
from kinetis_queue.exceptions import ConnectionFailedError, OutcomeUnknownError

#: Replies that refuse a command without applying it (the cluster is changing under it).
_REFUSED = (AskError, ClusterDownError, TryAgainError)

Address = tuple[str, int]


class ClusterClient:
    """RedisClient's interface (execute, script, wait_any, close) over a cluster's masters; thread-safe."""

    def __init__(self, start: Sequence[Address], factory: Callable[[], Connection]) -> None:
        """``factory`` opens a connection with the start nodes' options; its host and port are replaced per node."""
        self._start = list(start)
        self._factory = factory
        self._nodes: dict[Address, RedisClient] = {}
        self._slots: list[RedisClient] | None = None
        self._masters: list[RedisClient] = []
        self._lock = threading.Lock()
        self._wait = (0, 1.0)

    def replicate(self, replicas: int, timeout: float) -> None:
        """RedisClient.replicate on every master's client, present and future."""
        self._wait = (replicas, timeout)
        for node in list(self._nodes.values()):
            node.replicate(replicas, timeout)

    # -- the slot map -----------------------------------------------------------------------------

    def _node(self, address: Address) -> RedisClient:
        node = self._nodes.get(address)
        if node is None:
            with self._lock:
                node = self._nodes.get(address)
                if node is None:
                    node = self._nodes[address] = RedisClient(
                        partial(self._factory, **{"host": address[0], "port": address[1]})
                    )
                    node.replicate(*self._wait)
        return node

    def refresh(self) -> None:
        """Read the slot map from the first node that answers (known masters first, then the start nodes)."""
        candidates = [*(a for a, n in self._nodes.items() if n in self._masters), *self._start]
        failures = []
        for address in dict.fromkeys(candidates):
            try:
                ranges = self._node(address).execute("CLUSTER", "SLOTS", what="cluster slot map read")
            except (ConnectionFailedError, OutcomeUnknownError, redis.ResponseError) as exc:
                failures.append(f"{address[0]}:{address[1]}: {exc}")
                continue
            slots: list[RedisClient | None] = [None] * REDIS_CLUSTER_HASH_SLOTS
            masters: dict[Address, RedisClient] = {}
            for start, end, master, *_replicas in ranges:
                host = master[0].decode() if master[0] else address[0]
                node = masters.setdefault((host, int(master[1])), self._node((host, int(master[1]))))
                slots[int(start) : int(end) + 1] = [node] * (int(end) - int(start) + 1)
            if any(node is None for node in slots):
                failures.append(f"{address[0]}:{address[1]}: not every slot is served")
                continue
            self._slots, self._masters = slots, list(masters.values())  # type: ignore[assignment]
            return
        raise ConnectionFailedError(f"Redis cluster slot map could not be read ({'; '.join(failures)})")

    def masters(self) -> list[RedisClient]:
        """One client per master (SCAN runs on each to list the queues)."""
        if self._slots is None:
            self.refresh()
        return list(self._masters)

    def node_for(self, key: str | bytes) -> RedisClient:
        """The client of the master serving ``key``'s slot."""
        slots = self._slots
        if slots is None:
            self.refresh()
            slots = self._slots
            assert slots is not None
        return slots[key_slot(key.encode() if isinstance(key, str) else key)]

    def _run(self, key: str | bytes, call: Callable[[RedisClient], Any], what: str) -> Any:
        """``call`` on the master of ``key``, following one MOVED; refused or failed commands are raised."""
        node = self.node_for(key)
        for attempt in (1, 2):
            try:
                return call(node)
            except MovedError as exc:
                # Refused, nothing applied: send it where the reply says (the map may lag behind a failover
                # on the node it was read from), and read the map again at the next command.
                self._slots = None
                if attempt == 2:
                    raise ConnectionFailedError(f"Redis {what} was not applied: the slot moved twice ({exc})") from exc
                node = self._node((exc.host, exc.port)) if exc.host else self.node_for(key)
            except _REFUSED as exc:
                self._slots = None
                raise ConnectionFailedError(f"Redis {what} was not applied: the cluster refused it ({exc})") from exc
            except (ConnectionFailedError, OutcomeUnknownError):
                self._slots = None  # perhaps a failover: the next command reads the map again
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    # -- RedisClient's interface ------------------------------------------------------------------

    def execute(self, *args: Any, what: str | None = None, durable: bool = False) -> Any:
        """A single-key command (its key is ``args[1]``), on that key's master."""
        what = what or str(args[0])
        return self._run(args[1], lambda node: node.execute(*args, what=what, durable=durable), what)

    def script(self, script: Script, keys: Sequence[str], args: Sequence[Any], durable: bool = False) -> Any:
        """``script`` on the master of its keys' slot (they share one: the queue's hash tag)."""
        return self._run(keys[0], lambda node: node.script(script, keys, args, durable), f"{script.name} script")

    def wait_any(self, commands: Sequence[Sequence[Any]], reply_within: float, what: str) -> list[Any]:
        """RedisClient.wait_any over the masters of the commands' keys (``command[1]``).

        A refusal (MOVED after a failover) ends the wait at once with no reply, after marking the map
        stale: the next sweep reads it again and reaches the new master.
        """
        try:
            nodes = [self.node_for(command[1]) for command in commands]
            if all(node is nodes[0] for node in nodes):
                return nodes[0].wait_any(commands, reply_within, what)
            return _wait_on_several(list(zip(nodes, commands, strict=True)), reply_within, what)
        except redis.ResponseError:
            self._slots = None
            return []
        except (ConnectionFailedError, OutcomeUnknownError):
            self._slots = None
            raise

    def close(self) -> None:
        for node in list(self._nodes.values()):
            node.close()


def _wait_on_several(pairs: list[tuple[RedisClient, Sequence[Any]]], reply_within: float, what: str) -> list[Any]:
    """RedisClient.wait_any's select over connections taken from several masters' clients."""
    sent: list[tuple[RedisClient, list[Connection], Connection]] = []
    answered: set[int] = set()
    try:
        for node, command in pairs:
            idle = node._idle
            conn = node._take(idle, what)
            sent.append((node, idle, conn))
            try:
                conn.send_command(*command)
            except _Errors as exc:
                raise ConnectionFailedError(f"Redis {what} was not sent: the write failed ({exc})") from exc
        try:
            index = {conn._sock: number for number, (_, _, conn) in enumerate(sent)}
            readable, _, _ = select.select(list(index), [], [], reply_within)
            replies = []
            for number in (index[sock] for sock in readable):
                replies.append(sent[number][2].read_response())
                answered.add(number)
        except _Errors as exc:
            raise OutcomeUnknownError(f"Redis {what} was sent and its reply could not be read ({exc})") from exc
        return replies
    finally:
        for number, (_, idle, conn) in enumerate(sent):
            RedisClient._give_back(idle, conn, number in answered)
