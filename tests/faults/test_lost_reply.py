"""B4, a reply lost after the server applied the request (RELIABILITY.md §3 B4), on PostgreSQL.

PostgreSQL-specific by nature: the fault proxy sits between psycopg and the server and reads the
PostgreSQL protocol, forwarding one statement (and its Sync) and then dropping the server's reply
and closing. The statement is applied; the client only sees a dead connection.

Contract: "What push() guarantees" (an exception after the backend was contacted does not prove
the job was not stored: pushing again after an unknown outcome can store a second copy) and
"Failure vocabulary" (any other exception from a settlement: outcome unknown, propagates).
What must hold: the caller gets an exception, the server saw the statement once, the job exists
exactly once, and nothing is lost: a lost claim is reclaimed after the visibility timeout.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError, transaction
from django.db import connections as db_connections

from kinetis_queue.backends.sql import SqlQueue
from kinetis_queue.worker import Worker
from tests.faults import procs
from tests.faults.faultproxy import CutAfter, FaultProxy, Pass
from tests.faults.harness import finish, push
from tests.faults.history import new_tag
from tests.faults.jobs import Tagged, TaggedFails
from tests.faults.stores import SqlStore
from tests.support.backends import SQL_BACKENDS, Backend

POSTGRES = [b for b in SQL_BACKENDS if settings.DATABASES[b.database or ""]["ENGINE"].endswith("postgresql")]

pytestmark = [pytest.mark.fault, pytest.mark.timeout(90)]

#: The statements cut, as they reach the server (a simple query, or the text of a Parse).
CLAIM = rb"^\s*UPDATE kinetis_queue_jobs SET reserved_at = \S+, reserved_token"
ACK = rb"^\s*DELETE FROM kinetis_queue_jobs WHERE id"
RELEASE = rb"^\s*UPDATE kinetis_queue_jobs SET reserved_at = NULL"
INSERT = rb"^\s*INSERT INTO kinetis_queue_jobs"
COMMIT = rb"^\s*COMMIT"


class Proxied:
    """An SqlQueue whose every connection (Django's for push, its own for the worker side) goes through a proxy."""

    def __init__(self, backend: Backend, seed: int) -> None:
        database = backend.database or ""
        real = db_connections[database].settings_dict
        self.proxy = FaultProxy(real["HOST"] or "127.0.0.1", int(real["PORT"] or 5432), framing="pg", seed=seed)
        self.proxy.start()
        self.alias = f"{database}_faultproxy"
        entry = copy.deepcopy(db_connections.settings[database])
        entry.update(NAME=real["NAME"], HOST="127.0.0.1", PORT=str(self.proxy.port))
        entry["OPTIONS"] = {**entry.get("OPTIONS", {}), "sslmode": "disable"}  # the proxy reads the protocol
        db_connections.settings[self.alias] = entry
        self.queue = SqlQueue(database=self.alias, visibility_timeout=1)

    def reconnect(self) -> None:
        """Drop every connection through the proxy (a failed one included); the next call reconnects."""
        self.queue.dispose()
        db_connections[self.alias].close()

    def close(self) -> None:
        self.reconnect()
        del db_connections[self.alias]
        del db_connections.settings[self.alias]
        self.proxy.close()


@pytest.fixture(params=POSTGRES, ids=lambda b: b.id)
def pg(request: pytest.FixtureRequest, seed: int) -> Iterator[tuple[Backend, Proxied]]:
    backend: Backend = request.param
    proxied = Proxied(backend, seed)
    try:
        yield backend, proxied
    finally:
        proxied.close()


def _cut(proxied: Proxied, statement: bytes, call: Any) -> str:
    """Run ``call`` with ``statement``'s reply cut; return the exception class it raised."""
    proxied.proxy.set(CutAfter(statement))
    before = proxied.proxy.matched
    with pytest.raises((DatabaseError, InterfaceError)) as raised:
        call()
    assert proxied.proxy.matched - before == 1, "the server did not see the statement exactly once"
    proxied.proxy.set(Pass())
    proxied.reconnect()
    return type(raised.value).__name__


def _process(queue: SqlQueue, queue_name: str, timeout: float = 5) -> bool:
    """One process_next() of a fresh worker (a worker stopped by a settlement error is replaced, not reused)."""
    worker = Worker(queue, retry_base_delay=0)
    try:
        return worker.process_next(timeout, [queue_name])
    finally:
        worker.close()


@pytest.mark.logs_errors("kinetis_queue.worker")  # the lost reply is logged
def test_a_lost_reply_is_an_error_the_server_saw_once_and_nothing_is_lost(
    pg: tuple[Backend, Proxied], queue_name: str, history_dir: Path, seed: int, run_id: str
) -> None:
    backend, proxied = pg
    queue, store = proxied.queue, SqlStore(backend.database or "")
    outcomes: dict[str, dict[str, Any]] = {}

    # (a) the claim: reserved with the reply lost, so the job is leased to no one until VT passes.
    push(queue, Tagged(new_tag(run_id, 0)), queue_name)
    outcomes["claim"] = {
        "raised": _cut(proxied, CLAIM, lambda: _process(queue, queue_name)),
        "reserved": store.column_where(queue_name, "reserved_token") is not None,
    }
    assert _process(queue, queue_name, timeout=10)  # reclaimed after VT and run
    assert store.remaining(queue_name) == 0

    # (b) the ack's DELETE, after the job ran: the worker stops on the error, the ack landed, no redelivery.
    push(queue, Tagged(new_tag(run_id, 1)), queue_name)
    outcomes["ack"] = {
        "raised": _cut(proxied, ACK, lambda: _process(queue, queue_name)),
        "rows": store.remaining(queue_name),
    }
    assert outcomes["ack"]["rows"] == 0
    assert not _process(queue, queue_name, timeout=2.5)

    # (c) the release's UPDATE (attempt 1 of 2 failed): applied once; one row; attempt 2 fails at the cap.
    push(queue, TaggedFails(new_tag(run_id, 2)), queue_name, max_attempts=2)
    outcomes["release"] = {
        "raised": _cut(proxied, RELEASE, lambda: _process(queue, queue_name)),
        "rows": store.remaining(queue_name),
    }
    assert outcomes["release"]["rows"] == 1
    assert _process(queue, queue_name)  # attempt 2: recorded and failed
    assert store.remaining(queue_name) == 0

    # (d) push in autocommit: the INSERT ran; the caller got an exception; the job exists once, not twice.
    outcomes["push"] = {
        "raised": _cut(proxied, INSERT, lambda: push_raising(queue, new_tag(run_id, 3), queue_name)),
        "rows": store.remaining(queue_name),
    }
    assert outcomes["push"]["rows"] == 1

    # (d') push inside the caller's atomic(): the COMMIT ran, its reply was lost.
    def committed_push() -> None:
        with transaction.atomic(using=proxied.alias):
            push_raising(queue, new_tag(run_id, 4), queue_name)

    outcomes["push_in_atomic"] = {"raised": _cut(proxied, COMMIT, committed_push), "rows": store.remaining(queue_name)}
    assert outcomes["push_in_atomic"]["rows"] == 2

    # Nothing is lost: both pushes whose outcome was unknown run, once each.
    drain_s = procs.drain(queue, [queue_name], store)
    report = finish(
        "B4-lost-reply",
        backend.id,
        seed,
        history_dir,
        queue_name,
        store=store,
        drain_s=drain_s,
        extra={"cases": outcomes, "cuts": proxied.proxy.cuts},
    )
    assert report["cuts"] == 5 and report["store_remaining"] == 0
    assert report["lost"] == 0 and report["unexpected"] == 0
    # The release whose reply was lost did land: its retry counts as the one duplicate (no release.ok).
    assert report["duplicated"] == 1
    # push() in autocommit raised (indeterminate); the atomic() push returned and its COMMIT raised.
    assert report["indeterminate"] == report["recovered"] == 1
    assert report["executed_unique"] == 4 and report["failed_records"] == 1


def push_raising(queue: SqlQueue, tag: str, queue_name: str) -> None:
    """A recorded push that lets its exception through (the test asserts on it)."""
    if push(queue, Tagged(tag), queue_name) is None:
        raise OperationalError("push outcome unknown (recorded as push.info)")
