"""THE claim: how pop() and pop_many() reserve rows, per database, side by side.

Each sweep is one reservation of up to ``limit`` rows (contract: "Backend mechanisms: SQL"):

- A row is claimable when it is on one of the requested queues, its ``available_at`` has passed
  (delayed push and delayed release write the same column), and it is either unreserved or
  reserved longer ago than the visibility timeout (its worker stopped renewing).
- Order is list order, then within a queue the job's ``priority`` (highest first), then ``id``
  (FIFO): every queue is read through the ``(queue, priority DESC, id)`` index on its own, in list
  order, so a claim never sorts the ready rows (see "Plan stability").
- The claim writes ``reserved_at`` and a fresh random ``reserved_token`` per row (128 bits, so
  a token names one reservation of one row: the batched fences in queue.py rely on it), and adds
  one to ``attempts`` when the row was an expired reservation: that lost delivery counts as an
  attempt. A fresh, released or unreserved row (token NULL) is not charged here.

PostgreSQL does it in one statement: a LATERAL subquery per requested queue (in list order) locks
rows under SKIP LOCKED until ``limit`` are found, and the UPDATE writes exactly those; a claim is
one round trip and one commit whatever ``limit`` is. MySQL 8 / MariaDB 10.6+ have SKIP LOCKED but
no ``UPDATE ... RETURNING``: they read the claimable rows' ids without a lock (one plain SELECT per
queue in priority order, through the ``(queue, priority DESC, id)`` index, never a filesort), then lock
those rows by primary key with ``SELECT ... FOR UPDATE SKIP LOCKED`` (claimability tested again) and
write them all with one ``UPDATE`` by primary key in the same transaction. InnoDB locks every row a
locking read reaches, whether or not the WHERE then keeps it: a locking read through the index would
lock the rows not due yet on its way and hide them from every other claim until its COMMIT, one that
became due meanwhile included (issue 27, item 17), and through a filesort every matching row (a
concurrent claim skipped them all: tests/faults/test_races.py G2). SQLite has no
row locks: its writers are serialized, so one guarded ``UPDATE ... RETURNING`` whose WHERE repeats
the claimability test cannot claim a row another claim took first.

Plan stability (PostgreSQL): the queue table's statistics are usually stale (analyzed while nearly
empty, then a burst of jobs arrives), and a planner that believes few rows are ready scans and sorts
every ready row for each claim (2.7 ms instead of 0.12 ms at 5,000 ready rows; issue 14). Two things
keep the claim on its index whatever the statistics say: the query shape (each queue's rows read in
``priority DESC, id`` order from the ``(queue, priority DESC, id)`` index, the queue name a parameter
of the LATERAL subquery, so the ORDER BY matches the index) and the worker's own connection, which
runs only this module's and queue.py's statements, all meant for an index, with sequential and bitmap scans disabled
(queue.py ``WORKER_SESSION``). tests/specific/test_sql_plan.py shows the plans.

Times are epoch seconds from this process's clock, not the database's (contract: clock skew
between hosts shifts when a reservation looks expired and when a delay ends).
"""

from __future__ import annotations

import secrets
from typing import Any, Final

from django.db.backends.base.base import BaseDatabaseWrapper

#: Each queue's claimable rows in delivery order: the claim index's order (models.QueuedJobRecord).
ORDER = "priority DESC, id"

#: What a claim reads back: enough to build the QueuedJob without a second query (plus the token).
COLUMNS = "id, job_id, queue, job_class, args, metadata, attempts, max_attempts, pushed_at"
#: What the claims on PostgreSQL and SQLite read back after the token, to put RETURNING's rows in order.
SORT_COLUMN = "priority"

#: A row is claimable: due, and unreserved or past its visibility timeout.
CLAIMABLE = "available_at <= %s AND (reserved_at IS NULL OR reserved_at <= %s)"

#: Expired reservations count as an attempt; a fresh, released or unreserved row does not.
NEXT_ATTEMPTS = "attempts + CASE WHEN reserved_token IS NULL THEN 0 ELSE 1 END"

#: Most rows one claim reserves (a pop_many() asking for more gets this many, then sweeps again).
MAX_CLAIM: Final = 500

#: PostgreSQL: one statement. The ARRAY() subquery runs once (an InitPlan): the nested loop over the
#: queue names in list order reads each queue's claimable rows from the claim index in ORDER,
#: locks them under SKIP LOCKED and stops at ``limit``; the UPDATE then finds them by primary key.
#: Every SET expression reads the row's old values, so NEXT_ATTEMPTS sees the old token.
POSTGRESQL_CLAIM: Final = (
    "UPDATE kinetis_queue_jobs SET reserved_at = %s, "
    "reserved_token = replace(gen_random_uuid()::text, '-', ''), "
    f"attempts = {NEXT_ATTEMPTS} "
    "WHERE id = ANY(ARRAY("
    "SELECT picked.id FROM unnest(%s::text[]) AS wanted(name) CROSS JOIN LATERAL ("
    f"SELECT id FROM kinetis_queue_jobs WHERE queue = wanted.name AND {CLAIMABLE} "
    f"ORDER BY {ORDER} LIMIT %s FOR UPDATE SKIP LOCKED) AS picked LIMIT %s)) "
    f"RETURNING {COLUMNS}, reserved_token, {SORT_COLUMN}"
)

#: SQLite: one queue's part of the guarded claim (in the order of the claim index).
SQLITE_PART: Final = f"SELECT id FROM kinetis_queue_jobs WHERE queue = %s AND {CLAIMABLE} ORDER BY {ORDER} LIMIT %s"

#: MySQL/MariaDB: one queue's claimable rows in delivery order, a plain read (no lock; run per queue in
#: priority order). It reads a few more than wanted (CLAIM_SPARE), for the rows concurrent claims take first.
CANDIDATES: Final = f"SELECT id FROM kinetis_queue_jobs WHERE queue = %s AND {CLAIMABLE} ORDER BY {ORDER} LIMIT %s"
#: Then those rows, by primary key, locked under SKIP LOCKED with claimability checked again (``{}``: the
#: placeholders): InnoDB locks each row such a read reaches before the WHERE is applied, so the claim
#: reaches only rows it means to take, never a row that is not due yet (see ``_claim_locked_transaction``).
LOCK_CANDIDATES: Final = (
    f"SELECT {COLUMNS}, reserved_token FROM kinetis_queue_jobs WHERE id IN ({{}}) AND {CLAIMABLE} "
    "FOR UPDATE SKIP LOCKED"
)
#: Rows read besides ``limit`` by CANDIDATES: how many concurrent claims of the same rows a claim outlasts
#: before it comes back empty (its popper then pauses, and the next sweep reads afresh).
CLAIM_SPARE: Final = 8


def claim_many(
    db: BaseDatabaseWrapper, queues: tuple[str, ...], limit: int, now: float, expired_before: float
) -> list[tuple[Any, ...]]:
    """Reserve up to ``limit`` claimable rows on ``queues``; return their COLUMNS plus the token
    each reservation wrote, in delivery order (queue list order, then priority, highest first, then id)."""
    limit = min(limit, MAX_CLAIM)
    if db.vendor == "postgresql":
        rows = _claim_one_statement(db, queues, limit, now, expired_before)
    elif db.features.has_select_for_update_skip_locked:
        return _claim_locked_transaction(db, queues, limit, now, expired_before)
    else:
        rows = _claim_guarded_update(db, queues, limit, now, expired_before)
    rank = {name: position for position, name in enumerate(queues)}
    return sorted(rows, key=lambda row: (rank[row[2]], -row[-1], row[0]))  # RETURNING has no order


def postgresql_claim(queues: tuple[str, ...], limit: int, now: float, expired_before: float) -> tuple[str, list[Any]]:
    """PostgreSQL's claim statement and its parameters (tests/specific/test_sql_plan.py EXPLAINs it)."""
    return POSTGRESQL_CLAIM, [now, list(queues), now, expired_before, limit, limit]


def _claim_one_statement(
    db: BaseDatabaseWrapper, queues: tuple[str, ...], limit: int, now: float, expired_before: float
) -> list[tuple[Any, ...]]:
    sql, params = postgresql_claim(queues, limit, now, expired_before)
    with db.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def _claim_locked_transaction(
    db: BaseDatabaseWrapper, queues: tuple[str, ...], limit: int, now: float, expired_before: float
) -> list[tuple[Any, ...]]:
    """MySQL/MariaDB: read the candidates without a lock, then lock them by primary key, ``limit`` at a time.

    A locking read through the claim index would lock every row it scans on the way to ``limit`` due ones,
    the rows not due yet included (``available_at`` is not in the index, so InnoDB locks the row before the
    WHERE rejects it), and keep them locked until its COMMIT; every other claim meanwhile skips them under
    SKIP LOCKED, a row that became due in between included: that claim pops nothing though a job is due
    (issue 27, item 17). Locked by primary key, only the rows this claim takes are reached (and a row a
    concurrent claim took first, skipped or rejected by the repeated test): the next candidates are then
    tried, in delivery order, so a busy queue is not left for a pause. No candidate: no transaction.
    """
    candidates: list[Any] = []
    with db.cursor() as cursor:
        for name in queues:
            cursor.execute(CANDIDATES, [name, now, expired_before, limit + CLAIM_SPARE - len(candidates)])
            candidates += [row[0] for row in cursor.fetchall()]
            if len(candidates) >= limit + CLAIM_SPARE:
                break
        if not candidates:
            return []
        return _lock_and_write(cursor, candidates, limit, now, expired_before)


def _lock_and_write(
    cursor: Any, candidates: list[Any], limit: int, now: float, expired_before: float
) -> list[tuple[Any, ...]]:
    """Lock up to ``limit`` of ``candidates`` (in their order) and write their reservations, in one transaction."""
    claimed: list[tuple[Any, ...]] = []
    cursor.execute("START TRANSACTION")
    try:
        locked: list[tuple[Any, ...]] = []
        start = 0
        while len(locked) < limit and start < len(candidates):
            chunk = candidates[start : start + limit - len(locked)]
            start += len(chunk)
            cursor.execute(LOCK_CANDIDATES.format(", ".join(["%s"] * len(chunk))), [*chunk, now, expired_before])
            found = {row[0]: row for row in cursor.fetchall()}
            locked += [found[row_id] for row_id in chunk if row_id in found]
        if not locked:
            cursor.execute("COMMIT")
            return []
        tokens, attempts, ids = [], [], []
        for row in locked:
            token = secrets.token_hex(16)
            count = row[6] + (0 if row[9] is None else 1)
            claimed.append((*row[:6], count, *row[7:9], token))
            tokens += [row[0], token]
            attempts += [row[0], count]
            ids.append(row[0])
        whens = " ".join(["WHEN %s THEN %s"] * len(locked))
        placeholders = ", ".join(["%s"] * len(locked))
        cursor.execute(
            f"UPDATE kinetis_queue_jobs SET reserved_at = %s, reserved_token = CASE id {whens} END, "
            f"attempts = CASE id {whens} END WHERE id IN ({placeholders})",
            [now, *tokens, *attempts, *ids],
        )
        cursor.execute("COMMIT")
    except BaseException:
        rollback_quietly(cursor)
        raise
    return claimed


def _claim_guarded_update(
    db: BaseDatabaseWrapper, queues: tuple[str, ...], limit: int, now: float, expired_before: float
) -> list[tuple[Any, ...]]:
    # One index-ordered SELECT per queue, in priority order, joined by UNION ALL (which keeps the
    # order of its parts): no sort of the ready rows, as on the other databases.
    part = f"SELECT id FROM ({SQLITE_PART})"
    parts: list[str] = []
    params: list[Any] = []
    for name in queues:
        parts.append(part)
        params += [name, now, expired_before, limit]
    sql = (
        "UPDATE kinetis_queue_jobs SET reserved_at = %s, reserved_token = lower(hex(randomblob(16))), "
        f"attempts = {NEXT_ATTEMPTS} WHERE id IN (SELECT id FROM ({' UNION ALL '.join(parts)}) LIMIT %s) "
        f"AND (reserved_at IS NULL OR reserved_at <= %s) RETURNING {COLUMNS}, reserved_token, {SORT_COLUMN}"
    )
    with db.cursor() as cursor:
        cursor.execute(sql, [now, *params, limit, expired_before])
        return list(cursor.fetchall())


def rollback_quietly(cursor: Any) -> None:
    try:
        cursor.execute("ROLLBACK")
    except Exception:  # noqa: S110  the original error is the one worth raising
        pass
