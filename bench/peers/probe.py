"""What every benchmark job does: record its own start and finish in Redis, so a drain is timed by the jobs.

The harness measures a drain from the first job's start to the N-th job's completion, both stamped
inside the worker process, so interpreter and library start-up never count. Each worker process
keeps its counts in memory (a lock makes the count right under threads) and writes one Redis
entry when its N-th job of a run ends: ``RPUSH <run>:done {"first": t0, "last": t1, "count": N}``,
which the harness waits for with BLPOP. A latency job writes ``start - pushed_at`` to
``<run>:lat`` at its start, which the pushing process waits for the same way.

Every peer calls these three plain functions from its own job wrapper (RQ enqueues them directly),
so the only work per job is one lock and a ``time.time()``, the same for every queue measured.
The recorder's Redis is named by BENCH_PEERS_PROBE_URL (a database of the bench's own).
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

PROBE_URL_ENV = "BENCH_PEERS_PROBE_URL"
DEFAULT_PROBE_URL = "redis://127.0.0.1:6379/14"

_lock = threading.Lock()
#: run tag -> [first start, completions so far]
_runs: dict[str, list[float]] = {}
_client: Any = None


def recorder() -> Any:
    """This process's Redis client for the records (redis-py clients are thread safe)."""
    global _client
    if _client is None:
        import redis

        _client = redis.Redis.from_url(os.environ.get(PROBE_URL_ENV, DEFAULT_PROBE_URL))
    return _client


def _started(run: str) -> None:
    now = time.time()
    with _lock:
        if run not in _runs:
            _runs[run] = [now, 0]


def _finished(run: str, n: int) -> None:
    with _lock:
        state = _runs[run]
        state[1] += 1
        last = state[1] == n
    if last:
        record = {"first": state[0], "last": time.time(), "count": n, "pid": os.getpid()}
        recorder().rpush(f"{run}:done", json.dumps(record))


def tick(run: str, n: int) -> None:
    """The no-op job: counts itself; the N-th completion of ``run`` writes the run's record."""
    _started(run)
    _finished(run, n)


def nap(run: str, n: int, ms: int) -> None:
    """The I/O-bound job: sleeps ``ms`` milliseconds (a stand-in for an HTTP call), then counts itself."""
    _started(run)
    time.sleep(ms / 1000)
    _finished(run, n)


def stamp(run: str, pushed_at: float) -> None:
    """The latency job: reports how long after its push it started."""
    recorder().rpush(f"{run}:lat", repr(time.time() - pushed_at))
