"""KQ_CRASHPOINT itself: a malformed value is refused at import, and ``NAME:N`` crashes at the N-th reach only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kinetis_queue import crashpoints

ROOT = Path(__file__).resolve().parents[2]
#: Reaches the point "here" three times, saying so after each reach that did not crash.
SCRIPT = (
    "from kinetis_queue import crashpoints\n"
    "for n in (1, 2, 3):\n"
    "    crashpoints.reach('elsewhere')\n"
    "    crashpoints.reach('here')\n"
    "    print('passed', n, flush=True)\n"
)


def _run(value: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KQ_CRASHPOINT": value, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_name_colon_n_crashes_at_the_nth_reach_of_that_point_only() -> None:
    done = _run("here:2")
    assert done.returncode == crashpoints.EXIT_CODE
    assert done.stdout.split("\n") == ["passed 1", ""]


@pytest.mark.parametrize("value", ["here:0", "here:x", ":2", "here:-1"])
def test_a_malformed_value_is_refused_at_import_naming_the_variable(value: str) -> None:
    done = _run(value)
    assert done.returncode == 1 and done.stdout == ""
    assert "ValueError: KQ_CRASHPOINT must be NAME or NAME:N with N a positive integer" in done.stderr
