"""``python -m bench.peers.client ROW ACTION``: the client side of one row, in a process of its own.

Actions (each prints one JSON object on its last stdout line):

- ``push --kind tick|nap --n N --run R [--ms MS]``: clear the row's queue, then push N jobs one call
  each; ``{"seconds": s}`` covers the N push calls only (library set-up and connect are untimed);
- ``latency --k K --gap G --budget B --run R``: with the row's worker idle, push one probe, wait for it
  to start (a warm-up, not counted), then K times (or until B seconds have passed, at least 3 times):
  sleep G seconds, push a probe, wait for its start;
  ``{"latencies": [...]}`` in seconds, each measured by the job (its start - the time before the push);
- ``bulk --n N`` (kinetis rows): N single pushes against one ``push_many`` of N;
- ``clear``.

The environment carries the run's BENCH_PEERS_* settings and the row's own (Peer.env()).
"""

from __future__ import annotations

import argparse
import json
import time

from bench.peers import probe
from bench.peers.base import Settings
from bench.peers.rows import row


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.peers.client")
    parser.add_argument("row")
    parser.add_argument("action", choices=["push", "latency", "bulk", "clear"])
    parser.add_argument("--kind", choices=["tick", "nap"], default="tick")
    parser.add_argument("--n", type=int, default=0)
    parser.add_argument("--ms", type=int, default=20)
    parser.add_argument("--run", default="")
    parser.add_argument("--k", type=int, default=0)
    parser.add_argument("--gap", type=float, default=0.02)
    parser.add_argument("--budget", type=float, default=0)
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    peer = row(args.row)
    peer.client_setup(settings)
    result: dict[str, object] = {}
    if args.action == "clear":
        peer.clear(settings)
    elif args.action == "push":
        peer.clear(settings)
        push = peer.pusher(args.kind, args.run, args.n, args.ms)
        started = time.perf_counter()
        for _ in range(args.n):
            push()
        result["seconds"] = time.perf_counter() - started
    elif args.action == "latency":
        result["latencies"] = latencies(peer, args.run, args.k, args.gap, args.budget)
    else:
        result = dict(peer.bulk(args.n))  # type: ignore[attr-defined]
    print(json.dumps(result), flush=True)


def latencies(peer: object, run: str, k: int, gap: float, budget: float) -> list[float]:
    """K probes, or fewer when ``budget`` seconds (if > 0) have passed: a worker that polls once a second
    would otherwise take K seconds. At least 3 are taken."""
    recorder = probe.recorder()
    key = f"{run}:lat"
    recorder.delete(key)

    def one(timeout: float) -> float:
        peer.push_stamp(run, time.time())  # type: ignore[attr-defined]
        # One-second waits: redis-py's default socket timeout (5 s in redis-py 8) is shorter than a
        # worker's start-up may be.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = recorder.blpop([key], timeout=1)
            if got is not None:
                return float(got[1])
        raise SystemExit(f"bench.peers.client: no latency probe started within {timeout} s")

    one(120)  # the worker is up, connected and idle
    samples: list[float] = []
    deadline = time.monotonic() + budget
    for _ in range(k):
        if budget > 0 and len(samples) >= 3 and time.monotonic() > deadline:
            break
        time.sleep(gap)
        samples.append(one(30))
    return samples


if __name__ == "__main__":
    main()
