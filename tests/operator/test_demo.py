"""``make demo``: what it installs (the app and Django only) and what it tells a new user (issue 12, item 14)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _dry_run(target: str, tmp_path: Path) -> str:
    """The commands ``make TARGET`` would run for a fresh clone (a demo venv that does not exist yet)."""
    if shutil.which("make") is None:
        pytest.fail("make is not installed", pytrace=False)
    result = subprocess.run(
        ["make", "-n", "-B", target, f"DEMO_VENV={tmp_path / 'venv-demo'}", f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout


def test_make_demo_installs_the_app_and_django_only(tmp_path: Path) -> None:
    commands = _dry_run("demo", tmp_path)
    # No system packages, no root, no dev tools, no services: only a venv, pip install -e . and the demo.
    for forbidden in ("system-deps", "apt-get", "sudo", "services.sh", "[dev]", "'.[", '".['):
        assert forbidden not in commands, forbidden
    installs = [line for line in commands.splitlines() if "pip install" in line]
    assert len(installs) == 1 and re.search(r"pip install .*-e \.$", installs[0]), installs
    assert str(tmp_path / "venv") + "/" not in commands  # the dev venv is neither built nor used
    assert "manage.py demo" in commands


def test_the_demo_ends_by_saying_what_to_try_next(tmp_path: Path) -> None:
    # manage.py's own settings (testproject.settings), not the suite's, on a database of this test's own.
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["KINETIS_DEMO_DB"] = str(tmp_path / "demo.sqlite3")
    result = subprocess.run(
        [sys.executable, "testproject/manage.py", "demo"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=True,
    )
    tail = result.stdout[result.stdout.index("Try next") :]
    assert "manage.py queue_failed" in tail
    assert "createsuperuser" in tail and "runserver" in tail and "/admin/" in tail
    assert "All 4 of 4 jobs settled" in result.stdout
