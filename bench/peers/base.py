"""What the harness knows about a queue it measures (a ``Peer``), and the settings every process shares.

A Peer is described on the harness side (which store, how to start its worker, what environment
it needs) and acts on the client side, in a short-lived process of its own started by
``python -m bench.peers.client``: pushing N jobs, pushing latency probes one at a time, clearing
its queue. The harness never imports a peer's library itself, so peers that need incompatible
global set-up (a Django settings module, a default broker) never meet in one process.

Every process learns the run's settings from the environment (``BENCH_PEERS_*``, see ``Settings``):
the Redis, PostgreSQL and RabbitMQ addresses, the run's tag (prefix of every queue name, so runs and
other users of the same servers never share a key or a queue) and the temp directory that holds
the configuration generated for this run.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
ENV_PREFIX = "BENCH_PEERS_"


@dataclass(frozen=True)
class Settings:
    """The run's shared settings, carried to every process in BENCH_PEERS_* variables."""

    redis_url: str
    pg_dsn: str
    amqp_url: str
    tag: str
    tmp: str

    def env(self) -> dict[str, str]:
        return {
            "BENCH_PEERS_REDIS_URL": self.redis_url,
            "BENCH_PEERS_PROBE_URL": self.redis_url,
            "BENCH_PEERS_PG_DSN": self.pg_dsn,
            "BENCH_PEERS_AMQP_URL": self.amqp_url,
            "BENCH_PEERS_TAG": self.tag,
            "BENCH_PEERS_TMP": self.tmp,
        }

    @classmethod
    def from_env(cls) -> Settings:
        e = os.environ
        return cls(
            e["BENCH_PEERS_REDIS_URL"],
            e["BENCH_PEERS_PG_DSN"],
            e["BENCH_PEERS_AMQP_URL"],
            e["BENCH_PEERS_TAG"],
            e["BENCH_PEERS_TMP"],
        )

    def pg(self) -> dict[str, str]:
        """The PostgreSQL DSN ("host=... port=... user=... dbname=...") as a dict."""
        return dict(part.split("=", 1) for part in self.pg_dsn.split())

    def django_database(self) -> dict[str, Any]:
        pg = self.pg()
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": pg["dbname"],
            "USER": pg.get("user", "postgres"),
            "HOST": pg.get("host", "127.0.0.1"),
            "PORT": pg.get("port", "5432"),
        }


#: A zero-argument callable that pushes one job.
Pusher = Callable[[], None]


class Peer:
    """One measured row: a queue library at one setting on one store.

    Subclasses fill in the harness side (``worker_argv``, ``worker_env``, ``prepare``) and the client
    side (``client_setup``, ``pusher``, ``push_stamp``, ``clear``); the client side runs only in
    ``python -m bench.peers.client`` processes, with ``env()`` applied.
    """

    #: Row id, used on the command line (``--peers``) and in queue names.
    name: str = ""
    #: What the table shows.
    label: str = ""
    #: "redis", "postgres" or "rabbitmq".
    store: str = ""
    #: Whether the I/O-bound workload can run 16 jobs at once in one process; if not, why (for the table).
    io_note: str = ""
    #: Whether this row is the project's own (kinetis-queue) rather than a peer.
    ours: bool = False

    def queue(self, settings: Settings) -> str:
        """This row's queue name: the run's tag and the row id, in characters every library accepts."""
        return f"{settings.tag}_{self.name.replace('-', '_')}"

    def env(self, settings: Settings) -> dict[str, str]:
        """Environment of this row's client and worker processes (on top of ``settings.env()``)."""
        return {"BENCH_PEERS_QUEUE": self.queue(settings), "PYTHONPATH": f"{settings.tmp}{os.pathsep}{REPO_ROOT}"}

    def prepare(self, settings: Settings) -> None:
        """Harness side, once per run: generate configuration, create schemas."""

    def worker_argv(self, settings: Settings, io: bool) -> list[str]:
        """The worker command: its documented best single-process setting, or 16 at once when ``io``."""
        raise NotImplementedError

    def worker_env(self, settings: Settings, io: bool) -> dict[str, str]:
        """Extra environment for the worker process only."""
        return {}

    def setting(self, io: bool) -> str:
        """The worker setting in words, for the table."""
        raise NotImplementedError

    # -- client side --------------------------------------------------------------------------------

    def client_setup(self, settings: Settings) -> None:
        """Client side: configure the library (Django set-up, open an app) before anything is timed."""

    def pusher(self, kind: str, run: str, n: int, ms: int) -> Pusher:
        """Client side: a callable pushing one job of ``kind`` ("tick" or "nap") for ``run``."""
        raise NotImplementedError

    def push_stamp(self, run: str, pushed_at: float) -> None:
        """Client side: push one latency probe."""
        raise NotImplementedError

    def clear(self, settings: Settings) -> None:
        """Client side: remove whatever this row left in its queue (jobs, finished records)."""


def bin_path(name: str) -> str:
    """A console script of this venv (beside the interpreter running the harness)."""
    return str(Path(sys.executable).parent / name)
