"""The suite's own hygiene checks (issue 28, tests/support/stray_logs.py): a log record at ERROR or above that a
test does not expect fails the test it arrives in, a late one from a thread included; caplog and the
logs_errors marker exempt a test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

#: The worktree root: the nested run imports tests.support.stray_logs from it.
ROOT = Path(__file__).resolve().parents[2]

#: The nested run loads the check alone: no Django, no xdist, no cache.
PLUGINS_OFF = ("-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:django", "-p", "no:randomly")

SAMPLE = """
import logging
import threading

import pytest

late = threading.Event()
logged = threading.Event()


def _later() -> None:
    late.wait(10)
    logging.getLogger("kinetis_queue").error("The worker's control failed: away")
    logged.set()


def test_stray() -> None:
    logging.getLogger("kinetis_queue").error("boom")


def test_expected_with_caplog(caplog: pytest.LogCaptureFixture) -> None:
    logging.getLogger("kinetis_queue").error("expected")
    assert "expected" in caplog.text


@pytest.mark.logs_errors
def test_expected_with_marker() -> None:
    logging.getLogger("other").critical("expected too")


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_expected_from_one_logger() -> None:
    logging.getLogger("kinetis_queue.worker").error("a job failed for good")


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_unexpected_from_another_logger() -> None:
    logging.getLogger("kinetis_queue.worker").error("a job failed for good")
    logging.getLogger("kinetis_queue").error("The worker's registry failed: away")


def test_warning_is_fine() -> None:
    logging.getLogger("kinetis_queue").warning("only a warning")


def test_leaves_a_thread() -> None:
    threading.Thread(target=_later, daemon=True).start()


def test_runs_when_the_thread_logs() -> None:
    late.set()
    assert logged.wait(10)
"""


def _nested_pytest(tmp_path: Path, sample: str, *args: str) -> subprocess.CompletedProcess[str]:
    """pytest on ``sample`` (as test_sample.py) in a process of its own, with ``args`` and none of the suite's
    plugins but those ``args`` load."""
    (tmp_path / "test_sample.py").write_text(sample)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "test_sample.py", *args, *PLUGINS_OFF],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_unexpected_error_records_fail_their_test_and_expected_ones_do_not(tmp_path: Path) -> None:
    run = _nested_pytest(tmp_path, SAMPLE, "-rA", "-p", "tests.support.stray_logs")
    out = run.stdout
    assert run.returncode == pytest.ExitCode.TESTS_FAILED, out
    assert "ERROR test_sample.py::test_stray" in out
    assert "kinetis_queue [call, thread MainThread]: boom" in out
    assert "ERROR test_sample.py::test_runs_when_the_thread_logs" in out  # the late record, charged where it came
    assert "The worker's control failed: away" in out
    assert "ERROR test_sample.py::test_unexpected_from_another_logger" in out
    assert "kinetis_queue [call, thread MainThread]: The worker's registry failed: away" in out
    passing = ("expected_with_caplog", "expected_with_marker", "expected_from_one_logger", "warning_is_fine")
    for fine in (*passing, "leaves_a_thread"):
        assert f"PASSED test_sample.py::test_{fine}" in out, out
    assert "ERROR test_sample.py::test_expected" not in out
    assert "3 errors" in out


RERUN_SAMPLE = """
from pathlib import Path

import pytest


def test_fails_once(tmp_path_factory: pytest.TempPathFactory) -> None:
    mark = Path(tmp_path_factory.getbasetemp(), "tried")
    first = not mark.exists()
    mark.touch()
    assert not first, "the first attempt's own failure"


def test_passes() -> None:
    pass
"""


def test_a_rerun_prints_the_failure_it_hid(tmp_path: Path) -> None:
    """tests/support/reruns.py: a test that passed on its rerun still shows why its first attempt failed."""
    run = _nested_pytest(tmp_path, RERUN_SAMPLE, "-p", "tests.support.reruns", "--reruns", "1")
    out = run.stdout
    assert run.returncode == pytest.ExitCode.OK, out
    assert "2 passed, 1 rerun" in out, out
    hid = out.split("what the reruns hid", 1)[1]
    assert "test_sample.py::test_fails_once (call)" in hid
    assert "the first attempt's own failure" in hid
    assert "test_passes" not in hid
