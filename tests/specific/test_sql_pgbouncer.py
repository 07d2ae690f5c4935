"""PostgreSQL behind PgBouncer in transaction pooling: what the SQL backend gives up there (docs/backends/pgbouncer.md).

The conformance suite and the kill storm run on the sql-pgbouncer row like on any other; this module checks
what is particular to the pooler (kinetis_queue/backends/sql/pooling.py): the worker leaves no session
setting on the pool's server connections (another client would inherit it), an idle worker polls
instead of LISTENing (a LISTEN would stay on a server session lent to others), and so does an outbox relay
whose outbox database is pooled, and a push prepares nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from django.db import connections as db_connections
from django.db import transaction
from django.db.utils import load_backend
from django.test import override_settings

from kinetis_queue import connections as queue_connections
from kinetis_queue.backends.sql import SqlQueue
from kinetis_queue.backends.sql.pooling import _same_host, owns_its_session, transaction_pooled
from kinetis_queue.backends.sql.queue import POLLING_POLL_PAUSE
from kinetis_queue.conf import connection_settings
from kinetis_queue.exceptions import QueueConfigurationError
from kinetis_queue.models import OutboxRecord
from kinetis_queue.outbox.relay import Relay
from kinetis_queue.worker.background import BackgroundLoop
from tests.jobs import Noop


@pytest.fixture
def pooled(pgbouncer: Any) -> Iterator[SqlQueue]:
    queue = queue_connections.build("pgbouncer")
    assert isinstance(queue, SqlQueue)
    try:
        yield queue
    finally:
        queue.dispose()


def _server_settings(alias: str, name: str, rounds: int = 20) -> set[str]:
    """``name`` as shown by the server sessions the pool lends ``alias``, over ``rounds`` transactions."""
    with db_connections[alias].cursor() as cursor:
        seen = set()
        for _ in range(rounds):
            cursor.execute(f"SHOW {name}")
            seen.add(cursor.fetchone()[0])
        return seen


def test_the_pooled_alias_is_detected_by_djangos_own_setting() -> None:
    assert transaction_pooled("pgbouncer")
    assert not transaction_pooled("postgres")
    assert not transaction_pooled("default")


def test_the_worker_leaves_no_session_setting_in_the_pool(pooled: SqlQueue, queue_name: str) -> None:
    """The worker connection's SETs (asynchronous commit, no scans) would reach other clients' transactions."""
    pooled.push(Noop(), queue=queue_name)
    job = pooled.pop(1, [queue_name])
    assert job is not None
    pooled.ack(job)
    assert _server_settings("pgbouncer", "synchronous_commit") == {"on"}
    assert _server_settings("pgbouncer", "enable_seqscan") == {"on"}


def test_an_idle_worker_polls_and_still_gets_a_push(pooled: SqlQueue, queue_name: str) -> None:
    """No LISTEN behind the pooler: the idle pause is the polling one, and a push during a wait is found."""
    assert pooled.poll_pause == POLLING_POLL_PAUSE
    got: list[Any] = []
    popping = threading.Event()

    def pop() -> None:
        popping.set()
        got.append(pooled.pop(10, [queue_name]))

    popper = threading.Thread(target=pop)
    popper.start()
    popping.wait(5)
    pooled.push(Noop(), queue=queue_name)
    popper.join(15)
    assert got and got[0] is not None
    pooled.ack(got[0])
    assert getattr(pooled._local, "listener", None) is None  # no LISTEN connection was opened


def test_a_push_prepares_no_statement(pooled: SqlQueue, queue_name: str) -> None:
    """A named prepared statement stays in the one server session that prepared it: none is made."""
    for _ in range(10):  # above psycopg's prepare threshold, had the prepared push been taken
        pooled.push(Noop(), queue=queue_name)
    with db_connections["pgbouncer"].cursor() as cursor:
        prepared = set()
        for _ in range(20):
            cursor.execute("SELECT count(*) FROM pg_prepared_statements")
            prepared.add(cursor.fetchone()[0])
    assert prepared == {0}
    assert pooled.size(queue_name) == 10
    pooled.clear(queue_name)


def test_an_idle_relay_of_a_pooled_outbox_polls_and_sends_a_committed_row(pgbouncer: Any, queue_name: str) -> None:
    """The redisbouncer connection keeps its outbox in PostgreSQL through PgBouncer: the write's NOTIFY reaches
    no relay there, so the relay polls (OUTBOX_POLL) and never opens a LISTEN connection."""
    queue = queue_connections.build("redisbouncer")
    settings = connection_settings("redisbouncer")
    assert settings.outbox is not None
    relay = Relay(queue, settings.outbox)
    loop = BackgroundLoop("outbox relay", relay.step, on_stop=relay.close)
    loop.start()
    try:
        with transaction.atomic(using="pgbouncer"):
            job_id = queue.push(Noop(), queue=queue_name)
        job = queue.pop(10, [queue_name])
        assert job is not None and job.id == job_id
        queue.ack(job)
        assert relay._listener is None
    finally:
        loop.stop()
        OutboxRecord.objects.using("pgbouncer").filter(connection="redisbouncer").delete()
        queue.dispose()


# -- Issue 27, item 10: the worker's SETs without DISABLE_SERVER_SIDE_CURSORS ----------------------------

#: Where Debian's PostgreSQL listens on a Unix socket.
UNIX_SOCKET_DIR = "/var/run/postgresql"


@pytest.fixture
def unmarked(pgbouncer: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[SqlQueue]:
    """The pgbouncer connection's queue, its alias without Django's pooling setting: nothing says it is pooled
    (a project that never uses ``.iterator()`` has no reason to set it)."""
    monkeypatch.setitem(db_connections["pgbouncer"].settings_dict, "DISABLE_SERVER_SIDE_CURSORS", False)
    queue = queue_connections.build("pgbouncer")
    assert isinstance(queue, SqlQueue) and not transaction_pooled("pgbouncer")
    try:
        yield queue
    finally:
        queue.dispose()


def _worker_setting(queue: SqlQueue, name: str) -> str:
    """``name`` as the worker's own connection sees it (opened and set up as a pop() opens it)."""
    with queue._worker_db().cursor() as cursor:
        cursor.execute(f"SHOW {name}")
        return str(cursor.fetchone()[0])


def test_a_worker_through_a_pooler_leaves_no_session_setting_by_default_without_djangos_pooling_setting(
    unmarked: SqlQueue, queue_name: str
) -> None:
    """By default the worker's SETs need a connection that owns its server session: the pooler is seen."""
    assert unmarked.session_settings is None
    for _ in range(3):  # a pop opens the worker's connection (where the SETs would run) and claims
        assert unmarked.pop(0.01, [queue_name]) is None
    assert _server_settings("pgbouncer", "synchronous_commit") == {"on"}
    assert _server_settings("pgbouncer", "enable_seqscan") == {"on"}
    assert _server_settings("pgbouncer", "enable_bitmapscan") == {"on"}


def test_only_a_direct_connection_is_seen_to_own_its_server_session(unmarked: SqlQueue) -> None:
    direct = queue_connections.build("postgres")
    assert isinstance(direct, SqlQueue)
    try:
        assert owns_its_session(direct._worker_db())
        assert _worker_setting(direct, "synchronous_commit") == "off"  # a direct worker keeps its settings
        assert not owns_its_session(unmarked._worker_db())
    finally:
        direct.dispose()


@pytest.mark.parametrize(("configured", "expected"), [(True, "off"), (False, "on")])
def test_session_settings_decides_on_a_direct_connection(configured: bool, expected: str) -> None:
    """SESSION_SETTINGS: True sets them without the check (a session pooler, say), False never does."""
    settings = connection_settings("postgres")
    queue = SqlQueue.from_settings(replace(settings, options={**settings.options, "SESSION_SETTINGS": configured}))
    try:
        assert queue.session_settings is configured
        assert _worker_setting(queue, "synchronous_commit") == expected
    finally:
        queue.dispose()


def test_session_settings_must_be_a_boolean_or_none() -> None:
    bad = {"BACKEND": "sql", "DATABASE": "postgres", "SESSION_SETTINGS": "yes"}
    with override_settings(KINETIS_QUEUE={"CONNECTIONS": {"default": bad}}):
        with pytest.raises(QueueConfigurationError, match=r"\['SESSION_SETTINGS'\] must be True or False"):
            connection_settings("default")


def test_a_direct_connection_over_a_unix_socket_owns_its_session() -> None:
    """Over a Unix socket the server's address is NULL: the process at the other end (the postmaster that
    forked the backend) is what tells a direct connection from a pooler's."""
    if not Path(UNIX_SOCKET_DIR).is_dir():
        pytest.skip(f"no PostgreSQL Unix socket directory at {UNIX_SOCKET_DIR}")
    settings_dict = {**db_connections["postgres"].settings_dict, "HOST": UNIX_SOCKET_DIR, "PORT": "5432"}
    db = load_backend(settings_dict["ENGINE"]).DatabaseWrapper(settings_dict, "postgres-unix")
    try:
        db.ensure_connection()
        assert owns_its_session(db)
    finally:
        db.close()


@pytest.mark.parametrize(
    ("ours", "theirs", "same"),
    [
        ("127.0.0.1", "127.0.0.1", True),
        ("::ffff:127.0.0.1", "127.0.0.1", True),
        ("fe80::1%eth0", "fe80::1", True),
        ("127.0.0.1", "10.0.0.5", False),
        ("127.0.0.1", None, False),
    ],
)
def test_addresses_are_compared_as_addresses(ours: str, theirs: str | None, same: bool) -> None:
    assert _same_host(ours, theirs) is same
