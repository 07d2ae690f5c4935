"""The package works on a machine that has never seen the project.

A copy of the checkout stands for a fresh clone (the files git tracks, and new ones it does not ignore, as the
worktree has them). ``make dist``'s two steps run on it once (``python -m build``: the wheel is built from the
sdist, so the sdist is complete too; ``twine check --strict``), and ``make dist`` itself needs no more than
build and twine (no system package, no dev venv). Then the tutorial (docs/tutorial/index.md) runs as written,
in a fresh virtualenv (no ``--system-site-packages``, no dev tools): its one ``pip install`` of the checkout
brings Django and nothing else; a Django project is made, migrated, pushed to, drained by ``queue_work
--stop-when-empty``, and its failed job is listed by ``queue_failed``; then the same on Redis. No step prints
an ERROR line but the final failure the tutorial shows on purpose. Two substitutions are made, both named on
the page: the checkout's path, and a Redis key prefix of this run's own.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docs.snippets import DOCS, snippets

ROOT = DOCS.parent
TUTORIAL = DOCS / "tutorial" / "index.md"
#: What the tutorial tells readers to replace with their checkout's path.
CHECKOUT_PLACEHOLDER = "/path/to/kinetis-queue"
REDIS_PREFIX = '"mysite:"'

pytestmark = pytest.mark.timeout(600)


@dataclass(frozen=True)
class Dist:
    wheel: Path
    sdist: Path


def _run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload, no-any-return]


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the checkout as a fresh clone has it: what git tracks or would add, as the worktree has it."""
    listed = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT)
    assert listed.returncode == 0, listed.stderr
    copy = tmp_path_factory.mktemp("clone") / "kinetis-queue"
    for name in filter(None, listed.stdout.split("\0")):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the worktree is not there
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    return copy


@pytest.fixture(scope="module")
def dist(checkout: Path) -> Dist:
    """`make dist`'s two steps, once for the module, in the copy."""
    out = checkout / "dist"
    built = _run([sys.executable, "-m", "build", "--outdir", str(out), str(checkout)])
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = out.glob("kinetis_queue-*.whl")
    (sdist,) = out.glob("kinetis_queue-*.tar.gz")
    checked = _run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return Dist(wheel, sdist)


def _source_data_files() -> set[str]:
    """Every file of the package that is not Python source, as git knows them (nothing built, nothing ignored)."""
    listed = _run(["git", "ls-files", "kinetis_queue"], cwd=ROOT)
    assert listed.returncode == 0, listed.stderr
    return {name for name in listed.stdout.split() if not name.endswith(".py")}


def _check_contents(dist: Dist) -> None:
    """Migrations, Lua scripts, templates, static files and py.typed (whatever the source tree holds), the
    licence, and the version of kinetis_queue.__version__."""
    import kinetis_queue

    with zipfile.ZipFile(dist.wheel) as wheel:
        names = set(wheel.namelist())
        (metadata,) = (n for n in names if n.endswith(".dist-info/METADATA"))
        meta = wheel.read(metadata).decode()
    assert _source_data_files() - names == set()
    assert {"kinetis_queue/py.typed", "kinetis_queue/migrations/0001_initial.py"} <= names
    assert f"Version: {kinetis_queue.__version__}\n" in meta
    assert dist.wheel.name.startswith(f"kinetis_queue-{kinetis_queue.__version__}-")
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "Requires-Dist: django>=5.2" in meta


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """An empty project directory and a clean environment: ``python`` is the base interpreter, no venv active."""
    home = tmp_path_factory.mktemp("tutorial")
    bin_dir = home / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys._base_executable)  # type: ignore[attr-defined]
    (home / "project").mkdir()
    keep = ("HOME", "LANG", "LC_ALL", "TMPDIR", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CACHE_DIR")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env["PATH"] = f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_PROGRESS_BAR"] = "off"
    yield home / "project", env


#: The one ERROR line the tutorial shows on purpose: order -1's final failure.
TUTORIAL_FAILURE = re.compile(r' ERROR kinetis_queue\.worker Job "shop\.jobs\.SendReceipt" failed permanently ')
#: What the tutorial's first ``pip install`` may bring: the package, Django and Django's own requirements.
CORE_INSTALL = {"pip", "kinetis-queue", "django", "asgiref", "sqlparse", "tzdata"}


def test_make_dist_needs_build_and_twine_only(tmp_path: Path) -> None:
    """`make dist` on a machine without the dev venv: no system packages (root), no dev extra."""
    planned = _run(["make", "-n", "dist", f"VENV={tmp_path / 'no-dev-venv'}", f"DIST_VENV={tmp_path / 'dist-venv'}"],
                   cwd=ROOT)  # fmt: skip
    assert planned.returncode == 0, planned.stderr
    assert "system-deps" not in planned.stdout and "apt" not in planned.stdout, planned.stdout
    assert "[dev]" not in planned.stdout and str(tmp_path / "no-dev-venv") not in planned.stdout, planned.stdout
    assert "-m pip install --quiet --progress-bar off build twine" in planned.stdout, planned.stdout


def test_the_wheel_holds_the_package(dist: Dist) -> None:
    _check_contents(dist)


def test_the_tutorial_runs_as_written_from_a_checkout(checkout: Path, project: tuple[Path, dict[str, str]]) -> None:
    """One test: every step depends on the one before."""
    cwd, env = project
    prefix = f'"mysite_{uuid.uuid4().hex[:8]}:"'
    steps = snippets(TUTORIAL)
    assert [s.action for s in steps].count("sh") >= 3
    assert sum(REDIS_PREFIX in s.body for s in steps) == 1
    python = cwd / ".venv" / "bin" / "python"
    install = steps[0].body
    assert f'pip install "{CHECKOUT_PLACEHOLDER}"' in install, install  # one pip install of the checkout
    assert not re.search(r"\b(sudo|apt|apt-get|make|dist/)", install), install  # no root, no build step first
    outputs: list[str] = []
    try:
        for step in steps:
            body = step.body.replace(CHECKOUT_PLACEHOLDER, str(checkout)).replace(REDIS_PREFIX, prefix)
            if step.action in ("write", "append"):
                assert step.target
                with (cwd / step.target).open("w" if step.action == "write" else "a", encoding="utf-8") as f:
                    f.write(("\n" if step.action == "append" else "") + body)
                continue
            assert step.action == "sh", step
            done = _run(["bash", "-euo", "pipefail", "-c", ". .venv/bin/activate 2>/dev/null || true\n" + body],
                        cwd=cwd, env=env)  # fmt: skip
            assert done.returncode == 0, f"{step}\n{done.stdout}\n{done.stderr}"
            outputs.append(done.stdout + done.stderr)
            if len(outputs) == 1:  # the install: Django and nothing else (no dev tools, no store library)
                assert _installed(python, env) <= CORE_INSTALL, _installed(python, env)
    finally:
        _delete_redis_keys(prefix.strip('"'))

    errors = [line for out in outputs for line in out.splitlines() if " ERROR " in line or "Traceback" in line]
    assert [line for line in errors if not TUTORIAL_FAILURE.search(line)] == [], errors
    assert len(errors) == 1, errors  # order -1 fails for good once
    installed, on_sqlite, redis_installed, on_redis = outputs
    assert "Successfully installed" in installed and "Successfully installed" in redis_installed
    assert "Applying kinetis_queue.0001_initial... OK" in on_sqlite
    assert "shop.jobs.SendReceipt" in on_sqlite and "ValueError" in on_sqlite  # queue_failed's row
    assert "no such order" in on_sqlite
    assert "shop.jobs.SendReceipt" in on_redis

    # The failed-jobs table lives in the Django database whatever the store: order -1's record is still listed.
    failed = _run([str(python), "manage.py", "queue_failed"], cwd=cwd, env=env)
    assert failed.returncode == 0, failed.stderr
    assert "shop.jobs.SendReceipt" in failed.stdout and "ValueError" in failed.stdout, failed.stdout
    have = _installed(python, env)
    assert {"kinetis-queue", "django", "redis"} <= have
    assert have.isdisjoint({"pytest", "ruff", "mypy", "django-stubs", "psycopg", "boto3"}), have
    where = _run([str(python), "-c", "import kinetis_queue; print(kinetis_queue.__file__)"], cwd=cwd, env=env)
    assert "/.venv/lib/" in where.stdout, where.stdout + where.stderr


def _installed(python: Path, env: dict[str, str]) -> set[str]:
    listed = _run([str(python), "-m", "pip", "list", "--format", "json"], env=env)
    assert listed.returncode == 0, listed.stderr
    return {p["name"].lower() for p in json.loads(listed.stdout)}


def _delete_redis_keys(prefix: str) -> None:
    import redis

    client = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    try:
        keys = list(client.scan_iter(match=f"{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def test_no_build_leftovers_in_the_checkout() -> None:
    """`python -m build` writes build/ and the egg-info in the checkout: both ignored, never committed."""
    ignored = _run(["git", "check-ignore", "build/", "kinetis_queue.egg-info/", "dist/"], cwd=ROOT)
    assert ignored.stdout.split() == ["build/", "kinetis_queue.egg-info/", "dist/"]
