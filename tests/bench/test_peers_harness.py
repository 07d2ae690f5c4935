"""``python -m bench.peers`` end to end, as a smoke run (``--quick``): it measures, reports and cleans up.

No timing is asserted (speed belongs in the bench's own output); what is checked is that every
workload produced its samples, the report has its table and its targets, the raw JSON holds the
samples, and no key of the run is left in Redis. The kinetis-queue row runs with this interpreter (the
project and redis-py are all it needs). A peer row needs the peers' venv that ``make bench-peers``
builds (.venv-bench); that test is skipped when the venv is missing: a test never installs anything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from tests.settings import REDIS_URL
from tests.support.coverage_env import uncovered

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
BENCH_PYTHON = REPO_ROOT / ".venv-bench" / "bin" / "python"
#: The bench's own Redis database (python -m bench.peers --redis-url), apart from the tests' keys.
BENCH_REDIS_URL = REDIS_URL.rsplit("/", 1)[0] + "/14"

pytestmark = pytest.mark.timeout(600)


def run_harness(python: Path | str, rows: str, tmp_path: Path) -> tuple[str, dict]:
    report = tmp_path / "peers.json"
    done = subprocess.run(
        [str(python), "-m", "bench.peers", "--quick", "--latency-k", "2", "--bulk-n", "20", "--peers", rows,
         "--redis-url", BENCH_REDIS_URL, "--json", str(report)],
        cwd=REPO_ROOT,
        # Untraced by coverage, as bench.scale's harness test (what its workers run is measured elsewhere).
        env=uncovered({k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}),
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, json.loads(report.read_text())


def check_row(result: dict, name: str, bulk: bool) -> None:
    samples = result["rows"][name]["samples"]
    assert len(samples["drain"]) == 1 and samples["drain"][0] > 0
    assert len(samples["push"]) == 1 and samples["push"][0] > 0
    assert len(samples["io"]) == 1 and samples["io"][0] > 0
    assert len(samples["latency"]) == 2 and all(0 <= value < 60 for value in samples["latency"])
    if bulk:
        assert samples["single_push"][0] > 0


def check_clean(result: dict) -> None:
    client = redis.Redis.from_url(BENCH_REDIS_URL)
    try:
        assert list(client.scan_iter(match=f"*{result['tag']}*", count=1000)) == []
    finally:
        client.close()


def test_kinetis_row_end_to_end(tmp_path: Path) -> None:
    stdout, result = run_harness(sys.executable, "kinetis-redis", tmp_path)
    assert result["errors"] == []
    check_row(result, "kinetis-redis", bulk=True)
    assert "### Redis" in stdout and "**kinetis-queue**" in stdout
    assert "latency p50 < 5 ms on Redis" in stdout
    statuses = {target["target"]: target["status"] for target in result["targets"]}
    assert statuses["latency p50 < 5 ms on Redis"] in {"met", "missed"}
    assert statuses["RabbitMQ drain >= Celery acks_late"] == "not measured"
    check_clean(result)


@pytest.mark.skipif(
    not BENCH_PYTHON.exists(), reason="the peers' venv (.venv-bench, built by make bench-peers) is missing"
)
def test_peer_row_beside_kinetis(tmp_path: Path) -> None:
    stdout, result = run_harness(BENCH_PYTHON, "kinetis-redis,huey", tmp_path)
    assert result["errors"] == []
    check_row(result, "kinetis-redis", bulk=True)
    check_row(result, "huey", bulk=False)
    assert "Huey 1 thread" in stdout
    redis_target = next(t for t in result["targets"] if t["target"].startswith("Redis drain"))
    assert redis_target["status"] in {"met", "missed"} and "Huey" in redis_target["detail"]
    check_clean(result)
