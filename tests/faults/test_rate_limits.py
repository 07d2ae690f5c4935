"""Rate limits under a kill storm (issue 30, kinetis_queue.ratelimits), on every storing backend.

Two workers at concurrency 8 start jobs of four rate keys, each allowed RATE_LIMIT starts per RATE_PER seconds,
one SIGKILL every half second. Counted by the starts the jobs recorded, no window of RATE_PER seconds holds more
than RATE_LIMIT + W starts of one key (W = 16 deliveries that may be admitted and not yet started:
docs/rate-limits.md, "Accuracy"); the kill storm's own checks prove nothing was lost and deferrals charged no
attempt that ended a job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kinetis_queue.contracts import Queue
from tests.faults import checker, history
from tests.faults.jobs import RATE_LIMIT, RATE_PER, RateTagged
from tests.faults.test_kill_storm import storm
from tests.support.backends import Backend

pytestmark = [pytest.mark.fault, pytest.mark.trait("stores_jobs")]

GROUPS = 4
WORKERS = 2
CONCURRENCY = 8


def _rated(tag: str, ms: int) -> RateTagged:
    return RateTagged(tag, group=f"r{int(tag.rsplit('-', 1)[1]) % GROUPS}", ms=ms)


@pytest.mark.storm
@pytest.mark.timeout(420)
def test_no_window_holds_more_starts_than_its_bound_through_a_kill_storm(
    backend: Backend,
    connection: Queue,
    maybe_store: Any,
    queue_name: str,
    history_dir: Path,
    seed: int,
    run_id: str,
) -> None:
    report = storm(
        "rate-limits-kill-storm",
        backend,
        connection,
        maybe_store,
        queue_name,
        history_dir,
        seed,
        run_id,
        jobs=120,
        kill_every=0.5,
        workers=WORKERS,
        concurrency=CONCURRENCY,
        job=_rated,
    )
    peaks = checker.most_starts_in_window(history.read(history_dir), "group", RATE_PER)
    bound = RATE_LIMIT + WORKERS * CONCURRENCY
    print(
        f"\n[{backend.id}] {RATE_LIMIT} per {RATE_PER}s per key, {report['kills']} kills: "
        f"most starts in one window per key {peaks} (bound {bound})"
    )
    assert report["kills"] >= 1
    assert sorted(peaks) == [f"r{n}" for n in range(GROUPS)]
    assert max(peaks.values()) <= bound
