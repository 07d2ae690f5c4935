"""The bare reference: the same queue written directly on each driver, with no Django and no library.

Every speed claim of the project is a ratio against these loops, measured in the same run on the
same database, so the figures hold on any machine. The loops do the minimum an at-least-once SQL
queue must do, on a table (``bare_jobs``) that mirrors ``kinetis_queue_jobs`` column for column
and index for index:

- push: one ``INSERT`` per job, committed on its own (autocommit), with the column values the
  project writes (a 32-hex job id, JSON text ``'{}'`` args and metadata, epoch-second times);
- drain, per job, on PostgreSQL and MariaDB: one transaction ``SELECT id ... ORDER BY priority DESC, id LIMIT 1
  FOR UPDATE SKIP LOCKED`` + ``UPDATE ... SET reserved_at, reserved_token`` + ``COMMIT``, then
  ``DELETE ... WHERE id AND reserved_token`` + ``COMMIT`` (two commits per job);
- drain on SQLite (no SKIP LOCKED, writers are serialized): ``UPDATE ... WHERE id = (SELECT ...)
  RETURNING id``, then the ``DELETE``, each committed on its own.

The claim's WHERE clause is the project's claimability test (queue, due, unreserved or expired),
and its order the project's (priority, highest first, then id), so both sides use the same index.
Drivers run with their defaults (so psycopg prepares a statement
run five times, which Django turns off), except that the MariaDB session uses READ COMMITTED, the
isolation level Django sets on every MySQL connection (the project side gets it too).

On PostgreSQL, ``--async-commit`` runs the drain with ``synchronous_commit = off``, the commit
mode of the project's worker connection: a supplementary, like-for-like reference.

Run as ``python -m bench.bare --backend sql-postgres --queue Q --n N [--async-commit]``: drains N
jobs in this process and prints ``{"jobs": N, "seconds": s, "rate": N/s}`` as JSON. Pushes run in
the parent process (bench/__main__.py), on a connection it opens before the clock starts.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sqlite3
import time
import uuid
from typing import Any

from bench.settings import BACKENDS, DATABASES

TABLE = "bare_jobs"
JOB_CLASS = "bench.jobs.Noop"
VISIBILITY_TIMEOUT = 300

#: The project's claimability test (kinetis_queue/backends/sql/claim.py), for one queue.
CLAIMABLE = "queue = {p} AND available_at <= {p} AND (reserved_at IS NULL OR reserved_at <= {p})"


def vendor(backend: str) -> str:
    """``postgresql``, ``mysql`` or ``sqlite`` for a benchmark backend name."""
    engine: str = DATABASES[BACKENDS[backend][1]]["ENGINE"]
    return engine.rsplit(".", 1)[1].replace("sqlite3", "sqlite")


def connect(backend: str, *, autocommit: bool) -> Any:
    """A plain driver connection to the backend's bench database."""
    settings = DATABASES[BACKENDS[backend][1]]
    kind = vendor(backend)
    if kind == "postgresql":
        import psycopg

        return psycopg.connect(
            host=settings["HOST"],
            port=int(settings["PORT"]),
            user=settings["USER"],
            dbname=settings["NAME"],
            autocommit=autocommit,
        )
    if kind == "mysql":
        import MySQLdb

        conn = MySQLdb.connect(
            host=settings["HOST"],
            port=int(settings["PORT"]),
            user=settings["USER"],
            database=settings["NAME"],
            charset="utf8mb4",
        )
        conn.cursor().execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
        conn.autocommit(autocommit)
        return conn
    conn = sqlite3.connect(settings["NAME"])
    conn.isolation_level = None  # autocommit: every statement commits on its own
    return conn


def _placeholder(backend: str) -> str:
    return "?" if vendor(backend) == "sqlite" else "%s"


def ensure_table(backend: str) -> None:
    """Create ``bare_jobs`` as a copy of ``kinetis_queue_jobs`` (migrate must have run first)."""
    kind = vendor(backend)
    conn = connect(backend, autocommit=True)
    try:
        cursor = conn.cursor()
        if kind == "postgresql":
            cursor.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} (LIKE kinetis_queue_jobs INCLUDING ALL)")
        elif kind == "mysql":
            cursor.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} LIKE kinetis_queue_jobs")
        else:
            # SQLite has no CREATE TABLE ... LIKE: replay the stored DDL of the project's table and index.
            cursor.execute("SELECT sql FROM sqlite_master WHERE tbl_name = 'kinetis_queue_jobs' AND sql IS NOT NULL")
            statements = [row[0] for row in cursor.fetchall()]
            for ddl in statements:
                ddl = ddl.replace('"kinetis_queue_jobs_claim"', '"bare_jobs_claim"')
                ddl = ddl.replace('"kinetis_queue_jobs"', f'"{TABLE}"')
                ddl = ddl.replace("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ", 1)
                ddl = ddl.replace("CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ", 1)
                cursor.execute(ddl)
    finally:
        conn.close()


def count(backend: str, queue: str) -> int:
    """Rows of ``queue`` in ``bare_jobs``."""
    conn = connect(backend, autocommit=True)
    try:
        cursor = conn.cursor()
        cursor.execute(f"SELECT COUNT(*) FROM {TABLE} WHERE queue = {_placeholder(backend)}", [queue])
        return int(cursor.fetchone()[0])
    finally:
        conn.close()


def clear(backend: str) -> None:
    """Empty ``bare_jobs`` (every queue)."""
    conn = connect(backend, autocommit=True)
    try:
        conn.cursor().execute(f"DELETE FROM {TABLE}")
    finally:
        conn.close()


def push(conn: Any, backend: str, queue: str, n: int) -> float:
    """Insert ``n`` jobs on ``conn`` (autocommit), one INSERT each; return the seconds taken."""
    p = _placeholder(backend)
    sql = (
        f"INSERT INTO {TABLE} (job_id, queue, job_class, args, metadata, attempts, max_attempts, "
        f"pushed_at, available_at) VALUES ({p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p})"
    )
    started = time.perf_counter()
    cursor = conn.cursor()
    for _ in range(n):
        now = time.time()
        cursor.execute(sql, [uuid.uuid4().hex, queue, JOB_CLASS, "{}", "{}", 0, None, now, now])
    cursor.close()
    return time.perf_counter() - started


def drain(backend: str, queue: str, n: int, *, async_commit: bool = False) -> float:
    """Claim and delete ``n`` jobs one at a time; return the seconds taken (connect included).

    ``async_commit`` (PostgreSQL only) sets ``synchronous_commit = off`` on the drain connection,
    the commit mode the project's worker connection uses: a supplementary, like-for-like reference.
    """
    p = _placeholder(backend)
    claimable = CLAIMABLE.format(p=p)
    delete = f"DELETE FROM {TABLE} WHERE id = {p} AND reserved_token = {p}"
    started = time.perf_counter()
    if vendor(backend) == "sqlite":
        claim = (
            f"UPDATE {TABLE} SET reserved_at = ?, reserved_token = ? WHERE id = "
            f"(SELECT id FROM {TABLE} WHERE {claimable} ORDER BY priority DESC, id LIMIT 1) RETURNING id"
        )
        conn = connect(backend, autocommit=True)
        try:
            cursor = conn.cursor()
            for _ in range(n):
                now = time.time()
                token = secrets.token_hex(16)
                cursor.execute(claim, [now, token, queue, now, now - VISIBILITY_TIMEOUT])
                row = cursor.fetchone()
                if row is None:
                    raise SystemExit(f"bare drain: {backend} ran out of jobs")
                cursor.execute(delete, [row[0], token])
        finally:
            conn.close()
        return time.perf_counter() - started
    select = f"SELECT id FROM {TABLE} WHERE {claimable} ORDER BY priority DESC, id LIMIT 1 FOR UPDATE SKIP LOCKED"
    update = f"UPDATE {TABLE} SET reserved_at = {p}, reserved_token = {p} WHERE id = {p}"
    conn = connect(backend, autocommit=False)
    try:
        cursor = conn.cursor()
        if async_commit:
            if vendor(backend) != "postgresql":
                raise SystemExit("bare drain: --async-commit is PostgreSQL only")
            cursor.execute("SET synchronous_commit TO OFF")
            conn.commit()
        for _ in range(n):
            now = time.time()
            token = secrets.token_hex(16)
            cursor.execute(select, [queue, now, now - VISIBILITY_TIMEOUT])
            row = cursor.fetchone()
            if row is None:
                raise SystemExit(f"bare drain: {backend} ran out of jobs")
            cursor.execute(update, [now, token, row[0]])
            conn.commit()
            cursor.execute(delete, [row[0], token])
            conn.commit()
    finally:
        conn.close()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bare", description="Bare drain of bare_jobs.")
    parser.add_argument("--backend", required=True, choices=sorted(BACKENDS))
    parser.add_argument("--queue", required=True)
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--async-commit", action="store_true", help="PostgreSQL: synchronous_commit = off")
    args = parser.parse_args(argv)
    seconds = drain(args.backend, args.queue, args.n, async_commit=args.async_commit)
    print(json.dumps({"jobs": args.n, "seconds": seconds, "rate": args.n / seconds}))


if __name__ == "__main__":
    main()
