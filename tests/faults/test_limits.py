"""Concurrency limits under a kill storm (issue 15, kinetis_queue.limits), on every storing backend.

Two workers at concurrency 8 run jobs of four groups limited to two at a time each, one SIGKILL every half
second. The history checker's ``max_concurrent`` proves that at no instant more than two jobs of one group
ran (a killed run counts until its kill); the kill storm's own checks prove nothing was lost and deferrals
charged no attempt that ended a job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kinetis_queue.contracts import Queue
from tests.faults import checker, history
from tests.faults.jobs import LimitedTagged
from tests.faults.test_kill_storm import storm
from tests.support.backends import Backend

pytestmark = [pytest.mark.fault, pytest.mark.trait("stores_jobs")]

GROUPS = 4
LIMIT = 2


def _limited(tag: str, ms: int) -> LimitedTagged:
    return LimitedTagged(tag, group=f"g{int(tag.rsplit('-', 1)[1]) % GROUPS}", ms=ms)


@pytest.mark.storm
@pytest.mark.timeout(300)
def test_no_more_than_the_limit_ever_runs_at_once_through_a_kill_storm(
    backend: Backend,
    connection: Queue,
    maybe_store: Any,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
) -> None:
    report = storm(
        "limits-kill-storm",
        backend,
        connection,
        maybe_store,
        queue_name,
        history_dir,
        seed,
        run_id,
        jobs=200,
        kill_every=0.5,
        workers=2,
        concurrency=8,
        job=_limited,
    )
    peaks = checker.max_concurrent(history.read(history_dir), "group")
    print(f"\n[{backend.id}] limit {LIMIT} per group, {report['kills']} kills: most at once per group {peaks}")
    assert report["kills"] >= 1
    assert sorted(peaks) == [f"g{n}" for n in range(GROUPS)]
    assert max(peaks.values()) <= LIMIT
