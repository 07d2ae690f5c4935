"""The checker on hand-written histories: each violation it exists to catch is caught."""

from __future__ import annotations

from typing import Any

import pytest

from tests.faults.checker import check
from tests.faults.history import History, read

pytestmark = pytest.mark.fault


def _ev(e: str, tag: str | None, mono: float, pid: int = 1, **fields: Any) -> dict[str, Any]:
    return {"e": e, "tag": tag, "pid": pid, "mono": mono, "wall": mono, **fields}


def _run(*events: dict[str, Any], records: dict[str, int] | None = None) -> dict[str, Any]:
    return check(events, scenario="unit", backend="none", seed=1, failed_records=records)


def test_a_clean_history_has_no_violation() -> None:
    report = _run(
        _ev("push.invoke", "a", 0),
        _ev("push.ok", "a", 1),
        _ev("exec.start", "a", 2, attempt=1),
        _ev("exec.done", "a", 3, attempt=1),
        _ev("settle.ack.ok", "a", 4),
    )
    assert (report["lost"], report["duplicated"], report["unexpected"], report["stale_accepted"]) == (0, 0, 0, 0)
    assert report["executed_unique"] == report["acknowledged"] == 1


def test_lost_duplicated_unexpected_and_stale_accepted_are_counted() -> None:
    report = _run(
        _ev("push.invoke", "lost", 0),
        _ev("push.ok", "lost", 0),
        _ev("push.invoke", "twice", 0),
        _ev("push.ok", "twice", 0),
        _ev("exec.start", "twice", 1, pid=1, attempt=1),
        _ev("exec.start", "twice", 2, pid=2, attempt=2),
        _ev("exec.done", "twice", 3, pid=1, attempt=1),
        _ev("exec.done", "twice", 4, pid=2, attempt=2),
        _ev("settle.ack.ok", "twice", 5),
        _ev("settle.ack.ok", "twice", 6),
        _ev("exec.start", "stranger", 7),
        _ev("exec.done", "stranger", 8),
    )
    assert report["lost"] == 1 and report["lost_tags"] == ["lost"]
    assert report["duplicated"] == 1
    assert report["unexpected"] == 1
    assert report["stale_accepted"] == 1 and report["acked_twice"] == 1
    assert report["overlapping_live_leases"] == 1


def test_a_recorded_failure_is_not_lost_and_a_release_is_not_a_duplicate() -> None:
    report = _run(
        _ev("push.invoke", "f", 0),
        _ev("push.ok", "f", 0),
        _ev("exec.start", "f", 1, attempt=1),
        _ev("settle.release.ok", "f", 2),
        _ev("exec.start", "f", 3, attempt=2),
        _ev("settle.fail.ok", "f", 4),
        records={"f": 1},
    )
    assert (report["lost"], report["duplicated"], report["failed_records"]) == (0, 0, 1)


def test_every_line_written_is_read_back_in_monotonic_order(tmp_path: Any) -> None:
    first, second = History(tmp_path, "a"), History(tmp_path, "b")
    first.record("push.ok", "x")
    second.record("exec.start", "x")
    first.record("exec.done", "x")
    (tmp_path / "cut.jsonl").write_text('{"e": "exec.start", "tag": "y", "mono": 1}\n{"e": "half')
    events = read(tmp_path)
    assert [e["e"] for e in events if e["tag"] == "x"] == ["push.ok", "exec.start", "exec.done"]
    assert [e["tag"] for e in events].count("y") == 1  # the cut line is skipped
    first.close()
    second.close()


def test_max_concurrent_counts_overlaps_per_group_and_ends_a_killed_run_at_its_kill() -> None:
    from tests.faults.checker import max_concurrent

    def start(tag: str, pid: int, t: float, group: str) -> dict[str, object]:
        return {"e": "exec.start", "tag": tag, "pid": pid, "attempt": 1, "mono": t, "group": group}

    def done(tag: str, pid: int, t: float) -> dict[str, object]:
        return {"e": "exec.done", "tag": tag, "pid": pid, "attempt": 1, "mono": t}

    events = [
        start("a", 1, 0.0, "g1"),
        start("b", 2, 0.5, "g1"),
        done("a", 1, 1.0),
        start("c", 3, 1.0, "g1"),  # starts as a ends: not at once
        {"e": "fault.sigkill", "tag": None, "pid": 9, "target": 2, "mono": 1.5},  # b never ended: killed
        start("d", 4, 1.6, "g1"),
        done("c", 3, 2.0),
        done("d", 4, 2.0),
        start("e", 5, 0.1, "g2"),
    ]
    assert max_concurrent(events, "group") == {"g1": 2, "g2": 1}
    # One process running a job twice under one attempt: two short runs, not one long one.
    twice = [
        start("t", 1, 0.0, "g"),
        done("t", 1, 0.1),
        start("u", 2, 0.5, "g"),
        start("t", 1, 0.9, "g"),
        done("t", 1, 1.0),
    ]
    assert max_concurrent([*twice, done("u", 2, 0.6)], "group") == {"g": 1}
    # A run no kill explains is counted as running to the end of the history.
    assert max_concurrent([start("x", 1, 0.0, "g"), start("y", 2, 5.0, "g"), done("y", 2, 6.0)], "group") == {"g": 2}


def test_an_error_of_a_batched_ack_is_classed_as_a_settlement() -> None:
    """The worker sends its acks in batches (AckBatch.flush -> Queue.ack_many -> the backend's _ack_many): a
    connection reset met there is a settlement's failure, which the fault scenarios (A3 on RabbitMQ) expect; it
    was classed "other" (a CI run's rerun of test_a3_frozen_worker_is_overtaken... [rabbitmq])."""
    from kinetis_queue.worker.acks import AckBatch
    from tests.faults.worker import where

    class Dropped:
        def ack_many(self, jobs: list[Any]) -> list[None]:
            return self._ack_many(jobs)

        def _ack_many(self, jobs: list[Any]) -> list[None]:
            raise ConnectionResetError(104, "Connection reset by peer")

    acks = AckBatch(Dropped())  # type: ignore[arg-type]
    acks.add(object(), lambda result: None)  # type: ignore[arg-type]
    acks.flush()
    with pytest.raises(ConnectionResetError) as raised:
        acks.raise_error()
    acks.close()
    assert where(raised.value.__traceback__) == "settle"


def test_most_starts_in_window_slides_over_each_keys_starts() -> None:
    """Starts at 0, 0.5, 0.9, 1.0 and 2.5 of key k: a window of 1 s holds at most three (0, 0.5, 0.9: the start
    at 1.0 is a full second after 0, so [0.5, 1.0] holds 0.5, 0.9 and 1.0); a history of one start per key is 1."""
    from tests.faults.checker import most_starts_in_window

    def start(t: float, key: str) -> dict[str, object]:
        return {"e": "exec.start", "tag": f"t{t}", "pid": 1, "attempt": 1, "mono": t, "group": key}

    events = [start(0.0, "k"), start(0.5, "k"), start(0.9, "k"), start(1.0, "k"), start(2.5, "k"), start(3.0, "j")]
    events.append({"e": "exec.done", "tag": "t0.0", "pid": 1, "attempt": 1, "mono": 0.2})  # not a start
    assert most_starts_in_window(events, "group", 1.0) == {"k": 3, "j": 1}
    assert most_starts_in_window(events, "group", 3.0) == {"k": 5, "j": 1}
    assert most_starts_in_window([], "group", 1.0) == {}
