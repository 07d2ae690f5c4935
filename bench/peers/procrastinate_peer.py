"""procrastinate on PostgreSQL: ``procrastinate worker -c 1`` (LISTEN/NOTIFY wake-ups, its default).

The app uses procrastinate's psycopg 3 connector directly (the worker that ``manage.py procrastinate
worker`` runs under Django is the same), built on first access of ``app`` from the BENCH_PEERS_*
environment. The schema is applied once in the bench database; finished jobs stay in its table
(procrastinate's default) and are deleted by ``clear`` before each push. The I/O-bound workload runs
``-c 16`` (sync tasks run in threads).
"""

from __future__ import annotations

import os
from typing import Any

from bench.peers import probe
from bench.peers.base import Peer, Pusher, Settings, bin_path

_built: dict[str, Any] = {}


def _build() -> dict[str, Any]:
    if not _built:
        from procrastinate import App, PsycopgConnector

        app = App(connector=PsycopgConnector(conninfo=os.environ["BENCH_PEERS_PG_DSN"]))
        queue = os.environ.get("BENCH_PEERS_QUEUE", "default")
        _built["app"] = app
        for fn in (probe.tick, probe.nap, probe.stamp):
            _built[fn.__name__] = app.task(name=fn.__name__, queue=queue)(fn)
    return _built


def __getattr__(name: str) -> Any:
    if name == "app":
        return _build()["app"]
    raise AttributeError(name)


class Procrastinate(Peer):
    name = "procrastinate"
    label = "procrastinate -c 1"
    store = "postgres"

    def prepare(self, settings: Settings) -> None:
        import psycopg

        with psycopg.connect(settings.pg_dsn, autocommit=True) as conn:
            if conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone() == (None,):
                os.environ.update(settings.env())
                app = _build()["app"]
                with app.open():
                    app.schema_manager.apply_schema()

    def worker_argv(self, settings: Settings, io: bool) -> list[str]:
        # --log-level warning: its worker logs two INFO lines per job otherwise (no other row logs per job).
        return [
            bin_path("procrastinate"),
            "--log-level",
            "warning",
            "--app",
            "bench.peers.procrastinate_peer.app",
            "worker",
            "-q",
            self.queue(settings),
            "-c",
            "16" if io else "1",
        ]

    def setting(self, io: bool) -> str:
        return f"worker -c {16 if io else 1}, LISTEN/NOTIFY"

    def client_setup(self, settings: Settings) -> None:
        self.app = _build()["app"]
        self.app.open()

    def pusher(self, kind: str, run: str, n: int, ms: int) -> Pusher:
        tasks = _build()
        if kind == "tick":
            return lambda: tasks["tick"].defer(run=run, n=n)
        return lambda: tasks["nap"].defer(run=run, n=n, ms=ms)

    def push_stamp(self, run: str, pushed_at: float) -> None:
        _build()["stamp"].defer(run=run, pushed_at=pushed_at)

    def clear(self, settings: Settings) -> None:
        import psycopg

        with psycopg.connect(settings.pg_dsn, autocommit=True) as conn:
            queue = self.queue(settings)
            conn.execute(
                "DELETE FROM procrastinate_events WHERE job_id IN (SELECT id FROM procrastinate_jobs "
                "WHERE queue_name = %s)",
                [queue],
            )
            conn.execute("DELETE FROM procrastinate_jobs WHERE queue_name = %s", [queue])
