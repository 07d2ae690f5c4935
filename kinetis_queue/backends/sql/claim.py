"""THE claim: how pop() reserves one row, per database, side by side.

Each pop() attempt is one reservation (contract: "Backend mechanisms: SQL"):

- A row is claimable when it is on one of the requested queues, its ``available_at`` has passed
  (delayed push and delayed release write the same column), and it is either unreserved or
  reserved longer ago than the visibility timeout (its worker stopped renewing).
- Priority is list order through a portable CASE expression, then ``id`` (FIFO).
- The claim writes ``reserved_at`` and a fresh random ``reserved_token``, and adds one to
  ``attempts`` when the row was an expired reservation: that delivery counts as an attempt.

PostgreSQL does it in one statement (the SKIP LOCKED subquery locks the row the UPDATE writes), so
a claim is one round trip and one commit. MySQL 8 / MariaDB 10.6+ have SKIP LOCKED but no
``UPDATE ... RETURNING``, so they lock with ``SELECT ... FOR UPDATE SKIP LOCKED`` and write with an
``UPDATE`` by primary key in one transaction, one SELECT per queue in priority order: ordered by a
CASE expression, a SELECT is a filesort, for which InnoDB locks every matching row it reads, so a
concurrent claim skipped them all (priority inversions and empty pops under contention,
tests/faults/test_races.py G2); ordered by the ``(queue, id)`` index, it locks the row it returns.
SQLite has no row locks: its writers are serialized, so one guarded ``UPDATE ... RETURNING`` whose
WHERE repeats the claimability test cannot claim a row another claim took first.

Times are epoch seconds from this process's clock, not the database's (contract: clock skew
between hosts shifts when a reservation looks expired and when a delay ends).
"""

from __future__ import annotations

from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

#: What a claim reads back: enough to build the QueuedJob without a second query.
COLUMNS = "id, job_id, queue, job_class, args, metadata, attempts, max_attempts, pushed_at"

#: A row is claimable: on the queues, due, and unreserved or past its visibility timeout.
CLAIMABLE = "available_at <= %s AND (reserved_at IS NULL OR reserved_at <= %s)"

#: Expired reservations count as an attempt; a fresh or released row does not.
NEXT_ATTEMPTS = "attempts + CASE WHEN reserved_token IS NULL THEN 0 ELSE 1 END"


def _candidates(queues: tuple[str, ...]) -> tuple[str, list[str]]:
    """The queue filter and priority order for ``queues``, with their parameters."""
    if len(queues) == 1:
        return "queue = %s", [queues[0]]
    placeholders = ", ".join(["%s"] * len(queues))
    return f"queue IN ({placeholders})", list(queues)


def _order(queues: tuple[str, ...]) -> tuple[str, list[Any]]:
    if len(queues) == 1:
        return "id", []
    whens = " ".join(f"WHEN %s THEN {rank}" for rank in range(len(queues)))
    return f"CASE queue {whens} END, id", list(queues)


def _select(queues: tuple[str, ...], now: float, expired_before: float, columns: str) -> tuple[str, list[Any]]:
    where, where_params = _candidates(queues)
    order, order_params = _order(queues)
    sql = f"SELECT {columns} FROM kinetis_queue_jobs WHERE {where} AND {CLAIMABLE} ORDER BY {order} LIMIT 1"
    return sql, [*where_params, now, expired_before, *order_params]


def claim(
    db: BaseDatabaseWrapper, queues: tuple[str, ...], now: float, expired_before: float, token: str
) -> tuple[Any, ...] | None:
    """Reserve the first claimable row on ``queues`` with ``token``; return its COLUMNS, or None."""
    if db.vendor == "postgresql":
        return _claim_one_statement(db, queues, now, expired_before, token)
    if db.features.has_select_for_update_skip_locked:
        return _claim_locked_transaction(db, queues, now, expired_before, token)
    return _claim_guarded_update(db, queues, now, expired_before, token)


def _claim_one_statement(
    db: BaseDatabaseWrapper, queues: tuple[str, ...], now: float, expired_before: float, token: str
) -> tuple[Any, ...] | None:
    select, params = _select(queues, now, expired_before, "id")
    sql = (
        f"UPDATE kinetis_queue_jobs SET reserved_at = %s, reserved_token = %s, attempts = {NEXT_ATTEMPTS} "
        f"WHERE id = ({select} FOR UPDATE SKIP LOCKED) RETURNING {COLUMNS}"
    )
    with db.cursor() as cursor:
        cursor.execute(sql, [now, token, *params])
        return cursor.fetchone()  # type: ignore[no-any-return]


def _claim_locked_transaction(
    db: BaseDatabaseWrapper, queues: tuple[str, ...], now: float, expired_before: float, token: str
) -> tuple[Any, ...] | None:
    with db.cursor() as cursor:
        cursor.execute("START TRANSACTION")
        try:
            row = None
            for name in queues:
                select, params = _select((name,), now, expired_before, f"{COLUMNS}, reserved_token")
                cursor.execute(f"{select} FOR UPDATE SKIP LOCKED", params)
                row = cursor.fetchone()
                if row is not None:
                    break
            if row is None:
                cursor.execute("COMMIT")
                return None
            attempts = row[6] + (0 if row[9] is None else 1)
            cursor.execute(
                "UPDATE kinetis_queue_jobs SET reserved_at = %s, reserved_token = %s, attempts = %s WHERE id = %s",
                [now, token, attempts, row[0]],
            )
            cursor.execute("COMMIT")
        except BaseException:
            _rollback_quietly(cursor)
            raise
    return (*row[:6], attempts, *row[7:9])


def _claim_guarded_update(
    db: BaseDatabaseWrapper, queues: tuple[str, ...], now: float, expired_before: float, token: str
) -> tuple[Any, ...] | None:
    select, params = _select(queues, now, expired_before, "id")
    sql = (
        f"UPDATE kinetis_queue_jobs SET reserved_at = %s, reserved_token = %s, attempts = {NEXT_ATTEMPTS} "
        f"WHERE id = ({select}) AND (reserved_at IS NULL OR reserved_at <= %s) RETURNING {COLUMNS}"
    )
    with db.cursor() as cursor:
        cursor.execute(sql, [now, token, *params, expired_before])
        return cursor.fetchone()  # type: ignore[no-any-return]


def _rollback_quietly(cursor: Any) -> None:
    try:
        cursor.execute("ROLLBACK")
    except Exception:  # noqa: S110  the original error is the one worth raising
        pass
