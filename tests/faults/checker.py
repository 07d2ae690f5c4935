"""The checker (RELIABILITY.md §2.1): turns a history into one report per scenario and backend.

Definitions (all per job tag; a tag is unique to one test job):

- ``attempted`` / ``acknowledged`` / ``failed`` / ``indeterminate``: tags with a ``push.invoke`` /
  ``push.ok`` / ``push.fail`` / ``push.info`` event;
- ``executions``: ``exec.start`` events (a delivery whose handler began, finished or not);
  ``completions``: ``exec.done`` events;
  ``executed_unique``: tags with an ``exec.done`` (handle() returned, written before the settlement);
- ``lost``: acknowledged tags with neither an ``exec.done`` nor a FailedJob record after the drain
  (a job failed at its cap is accounted for, not lost);
- ``duplicated``: executions minus the tags that started at least once minus accepted releases (a
  retry the worker asked for is not a duplicate; a delivery cut by a kill and run again is one);
- ``unexpected``: tags that started but were never attempted; ``recovered``: indeterminate tags that ran;
- ``acked_twice``: tags with two accepted acks; ``redelivered_after_ack``: a start after an accepted ack;
- ``overlapping_live_leases``: pairs of completed executions of one tag whose intervals overlap;
- ``stale_rejected``: settlements refused as stale (``job_settlement_lost``);
  ``stale_accepted``: accepted terminal settlements (ack or fail) beyond the first, per tag: on a
  fenced backend only the live delivery's settlement can land, so any extra one was a stale one accepted;
- ``settlement_errors`` / ``worker_stops``: workers that stopped on an exception (from a settlement / at all);
- ``malformed_settled``: malformed messages the workers removed; ``failed_records``: FailedJob rows of the run;
- ``faults_injected``: ``fault.*`` events the nemesis wrote.

Print the report and write it under ``reports/reliability/``; the seed replays the run (``KQ_SEED=``).
``python -m tests.faults.checker [DIR]`` prints every report in DIR as one table.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
#: Where reports go: KQ_REPORTS_DIR (make soak uses reports/reliability/soak), else reports/reliability.
REPORTS = Path(os.environ.get("KQ_REPORTS_DIR") or ROOT / "reports" / "reliability")

#: The columns of the summary table (the §2.1 object has more).
TABLE = (
    "attempted",
    "acknowledged",
    "executed_unique",
    "executions",
    "lost",
    "duplicated",
    "unexpected",
    "stale_rejected",
    "stale_accepted",
    "malformed_settled",
    "failed_records",
    "worker_stops",
    "faults_injected",
    "store_remaining",
    "drain_s",
    "seed",
)


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 4)
    return round(statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1], 4)


def check(
    events: Iterable[Mapping[str, Any]],
    *,
    scenario: str,
    backend: str,
    seed: int,
    failed_records: Mapping[str, int] | None = None,
    store_remaining: int | None = None,
    drain_s: float | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The §2.1 report for one scenario run."""
    by_event: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for event in events:
        by_event[event["e"]].append(event)

    def tags(name: str) -> set[str]:
        return {e["tag"] for e in by_event[name] if e.get("tag")}

    attempted, acked, push_failed, unknown = tags("push.invoke"), tags("push.ok"), tags("push.fail"), tags("push.info")
    starts = [e for e in by_event["exec.start"] if e.get("tag")]
    started, done = {e["tag"] for e in starts}, tags("exec.done")
    records = {tag: n for tag, n in (failed_records or {}).items() if n}

    ack_events: dict[str, list[float]] = defaultdict(list)
    for e in by_event["settle.ack.ok"]:
        if e.get("tag"):
            ack_events[e["tag"]].append(e["mono"])
    terminal = Counter(
        e.get("tag") or e.get("job_id") for name in ("settle.ack.ok", "settle.fail.ok") for e in by_event[name]
    )
    start_times: dict[str, list[float]] = defaultdict(list)
    for e in starts:
        start_times[e["tag"]].append(e["mono"])

    redelivered_after_ack = sum(
        1 for tag, acks in ack_events.items() if any(t > min(acks) for t in start_times.get(tag, []))
    )
    gaps = [b - a for times in start_times.values() for a, b in itertools.pairwise(times)]
    push_ok_at = {e["tag"]: e["mono"] for e in by_event["push.ok"] if e.get("tag")}
    latencies = [min(times) - push_ok_at[tag] for tag, times in start_times.items() if tag in push_ok_at]
    stops = by_event["worker.stop"]

    report: dict[str, Any] = {
        "scenario": scenario,
        "backend": backend,
        "attempted": len(attempted),
        "acknowledged": len(acked),
        "failed": len(push_failed),
        "indeterminate": len(unknown),
        "executed_unique": len(done),
        "executions": len(starts),
        "completions": sum(1 for e in by_event["exec.done"] if e.get("tag")),
        "lost": len(acked - done - set(records)),
        "lost_tags": sorted(acked - done - set(records))[:20],
        "duplicated": len(starts) - len(started) - len([e for e in by_event["settle.release.ok"] if e.get("tag")]),
        "unexpected": len(started - attempted),
        "recovered": len(unknown & (done | started)),
        "acked_twice": sum(1 for times in ack_events.values() if len(times) > 1),
        "redelivered_after_ack": redelivered_after_ack,
        "overlapping_live_leases": _overlaps(starts, by_event["exec.done"]),
        "stale_rejected": sum(len(v) for k, v in by_event.items() if k.startswith("settle.") and k.endswith(".stale")),
        "stale_accepted": sum(n - 1 for n in terminal.values() if n > 1),
        "settlement_errors": sum(1 for e in stops if e.get("step") == "settle"),
        "worker_stops": len(stops),
        "malformed_settled": len(by_event["malformed.settled"]),
        "failed_records": sum(records.values()),
        "faults_injected": sum(len(v) for k, v in by_event.items() if k.startswith("fault.")),
        "redelivery_delay_max_s": round(max(gaps), 3) if gaps else None,
        "drain_s": None if drain_s is None else round(drain_s, 2),
        "latency_p50_s": _percentile(latencies, 50),
        "latency_p99_s": _percentile(latencies, 99),
        "store_remaining": store_remaining,
        "seed": seed,
    }
    if extra:
        report.update(extra)
    return report


def _overlaps(starts: list[Mapping[str, Any]], dones: list[Mapping[str, Any]]) -> int:
    """Pairs of completed executions of one tag that ran at the same time (matched by pid and attempt)."""
    ends = {(e["tag"], e["pid"], e.get("attempt")): e["mono"] for e in dones if e.get("tag")}
    intervals: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for e in starts:
        end = ends.get((e["tag"], e["pid"], e.get("attempt")))
        if end is not None:
            intervals[e["tag"]].append((e["mono"], end))
    count = 0
    for spans in intervals.values():
        spans.sort()
        for i, (_, end) in enumerate(spans):
            count += sum(1 for start, _ in spans[i + 1 :] if start < end)
    return count


def max_concurrent(events: Iterable[Mapping[str, Any]], field: str) -> dict[str, int]:
    """The most executions that ran at one instant, per value of the start events' ``field`` (a limit's group).

    An execution runs from its ``exec.start`` to the next ``exec.done`` or ``exec.raise`` of the same tag,
    pid and attempt (one process may run a job twice under one attempt: a RabbitMQ redelivery keeps the
    count); one that never ended ran until its process was SIGKILLed (``fault.sigkill`` naming the pid),
    and, if no kill explains it, until the end of the history (counted against the limit: never hidden).
    """
    ordered = sorted(events, key=lambda e: e["mono"])
    kills: dict[int, list[float]] = defaultdict(list)
    for e in ordered:
        if e["e"] == "fault.sigkill":
            kills[int(e["target"])].append(e["mono"])
    last = ordered[-1]["mono"] if ordered else 0.0
    open_runs: dict[tuple[Any, ...], list[Mapping[str, Any]]] = defaultdict(list)
    edges: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for e in ordered:
        run = (e.get("tag"), e.get("pid"), e.get("attempt"))
        if e["e"] == "exec.start" and field in e:
            open_runs[run].append(e)
        elif e["e"] in ("exec.done", "exec.raise") and open_runs.get(run):
            start = open_runs[run].pop(0)
            edges[str(start[field])] += [(start["mono"], 1), (e["mono"], -1)]
    for starts in open_runs.values():
        for start in starts:
            end = min((t for t in kills.get(start["pid"], []) if t >= start["mono"]), default=last)
            edges[str(start[field])] += [(start["mono"], 1), (end, -1)]
    result: dict[str, int] = {}
    for group, points in edges.items():
        running = peak = 0
        for _, step in sorted(points):  # at one instant an end (-1) sorts before a start (+1)
            running += step
            peak = max(peak, running)
        result[group] = peak
    return result


def write(report: Mapping[str, Any], directory: Path | None = None) -> Path:
    """Print the report (with its seed) and write it as ``<scenario>-<backend>.json``."""
    directory = directory or REPORTS
    if not directory.is_absolute():
        directory = ROOT / directory
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{report['scenario']}-{report['backend']}.json"
    text = json.dumps(report, indent=2, sort_keys=False, default=str)
    path.write_text(text + "\n")
    print(f"\n[checker] {report['scenario']} [{report['backend']}] KQ_SEED={report['seed']}\n{text}")
    return path


#: Scenario-specific figures shown in the table's last column when a report has them.
NOTES = (
    "kills",
    "rounds",
    "double_deliveries",
    "pops_per_s",
    "runs",
    "steps",
    "faults",
    "terminations",
    "hung_workers",
    "malformed_injected",
    "rebuild_failures_injected",
    "canary_present",
    "crash_point",
    "measured_shift_s",
    "per_skew",
    "matrix",
    "cases",
    "redelivery_s",
    "stale_outcome",
    "attempts",
    "idle_signal_to_exit_s",
    "late_job_taken_by_interrupted_pop",
    "reclaims_while_alive",
    "negative_control",
    "early_executions",
    "lateness_max_s",
    "pill_deliveries",
    "pill_attempts",
    "normal_done_before_drain",
    "deliveries",
    "transitions",
)


def table(directory: Path = REPORTS) -> str:
    """Every report in ``directory`` as one Markdown table."""
    reports = [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))]
    head = ("scenario", "backend", *TABLE)
    lines = ["| " + " | ".join((*head, "notes")) + " |", "|" + "---|" * (len(head) + 1)]
    for r in reports:
        notes = "; ".join(f"{k}={json.dumps(r[k], separators=(',', ':'))}" for k in NOTES if k in r)
        cells = ["" if r.get(k) is None else str(r.get(k)) for k in head]
        lines.append("| " + " | ".join([*cells, notes.replace("|", "/")]) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(Path(sys.argv[1]) if len(sys.argv) > 1 else REPORTS))


def most_starts_in_window(events: Iterable[Mapping[str, Any]], field: str, seconds: float) -> dict[str, int]:
    """The most ``exec.start`` events of one value of ``field`` (a rate key) within any ``seconds`` of the
    monotonic clock, per value: a rate limit's window, counted by the starts the jobs themselves recorded."""
    starts: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e["e"] == "exec.start" and field in e:
            starts[str(e[field])].append(e["mono"])
    result: dict[str, int] = {}
    for key, times in starts.items():
        times.sort()
        first = peak = 0
        for last, at in enumerate(times):
            while at - times[first] >= seconds:  # the window [at - seconds, at] holds times[first:last + 1]
                first += 1
            peak = max(peak, last - first + 1)
        result[key] = peak
    return result
