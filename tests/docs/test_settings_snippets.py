"""Every settings snippet of the docs works in a new project of the Django running the tests: appended to the
settings file ``django-admin startproject`` writes, ``manage.py check`` passes.

So a snippet cannot clash with what a new project already has (Django 6.1's ``MAILERS`` refuses the
``EMAIL_*`` settings beside it). A snippet for some Django versions only says which in its marker
(``<!-- test: settings django<6.1 -->``). The modules of the reader's own project a snippet names (an
``IMPORTS`` entry, a schedule's ``JOB``) are written as stubs first. The Django 5.2 run is the ``-m core``
stage of ``make test`` (.venv-dj52), and Django 6.0 runs each snippet through ``KQ_SNIPPET_PYTHONS``
(.venv-dj60); the tutorial's own settings run in tests/packaging/test_wheel.py.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import django
import pytest
from packaging.specifiers import SpecifierSet

from tests.docs.snippets import DOCS, Snippet, pages, snippets

pytestmark = [pytest.mark.core, pytest.mark.timeout(300)]

ROOT = DOCS.parent
ALL = [s for page in pages() for s in snippets(page)]
#: The interpreters whose Django each snippet runs on: this one, and those ``KQ_SNIPPET_PYTHONS`` lists
#: (os.pathsep-separated; make test gives a venv of Django 6.0 alone, .venv-dj60, the app on PYTHONPATH).
PYTHONS = [
    sys.executable,
    *(os.path.abspath(p) for p in os.environ.get("KQ_SNIPPET_PYTHONS", "").split(os.pathsep) if p),
]
SETTINGS = [s for s in ALL if s.action == "settings"]
#: A top-level assignment to an upper-case name: a block of settings.
_SETTING = re.compile(r"^[A-Z][A-Z0-9_]*\s*(?:\+?=|\[|\.)", re.MULTILINE)
_PYTHON_FENCE = re.compile(r"^(?P<marker><!-- test: [^\n]*-->\n)?```python[^\n]*\n(?P<body>.*?)^```$", re.M | re.S)


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


def _django_version(python: str) -> str:
    if python == sys.executable:
        return django.get_version()
    found = _run([python, "-c", "import django; print(django.get_version())"], cwd=ROOT)
    assert found.returncode == 0, f"{python}: {found.stderr}"
    return found.stdout.strip()


@pytest.fixture(scope="module")
def new_projects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    """Per interpreter, what its ``django-admin startproject mysite .`` writes, made on first use, and its Django."""
    return {}


def _new_project(
    projects: dict[str, tuple[Path, str]], python: str, factory: pytest.TempPathFactory
) -> tuple[Path, str]:
    if python not in projects:
        home = factory.mktemp("startproject")
        made = _run([python, "-m", "django", "startproject", "mysite", "."], cwd=home)
        assert made.returncode == 0, made.stderr
        projects[python] = (home, _django_version(python))
    return projects[python]


def _applies(snippet: Snippet, version: str) -> bool:
    if snippet.target is None:
        return True
    name, _, spec = snippet.target.partition("django")
    assert name == "" and spec, f"{snippet}: a settings marker's condition is django<spec>, not {snippet.target!r}"
    return version in SpecifierSet(spec)


def _write_stub(project: Path, dotted: str, job_args: dict[str, Any] | None, *, middleware: bool = False) -> str:
    """A module of the reader's project (a Job class ``dotted`` when ``job_args`` is given, a middleware class
    ``dotted`` with ``middleware``); its top package."""
    module, _, name = dotted.rpartition(".") if job_args is not None or middleware else (dotted, "", "")
    if module.split(".")[0] == "kinetis_queue":
        return ""
    path = project.joinpath(*module.split("."))
    for parent in [path.parent, *path.parent.parents]:
        if parent == project:
            break
        parent.mkdir(exist_ok=True)
        (parent / "__init__.py").touch()
    code = ""
    if job_args is not None:
        params = "".join(f", {arg}: object = None" for arg in job_args)
        code = f"from kinetis_queue import Job\n\n\nclass {name}(Job):\n    def __init__(self{params}) -> None:\n"
        code += "".join(f"        self.{arg} = {arg}\n" for arg in job_args) or "        pass\n"
        code += "\n    def handle(self) -> None:\n        pass\n"
    if middleware:
        code = f"from kinetis_queue.middleware import Middleware\n\n\nclass {name}(Middleware):\n    pass\n"
    with (path.with_suffix(".py")).open("a", encoding="utf-8") as f:
        f.write(code)
    return module.split(".")[0]


def _reader_modules(project: Path, snippet: Snippet) -> list[str]:
    """Stubs for the modules of the reader's project the snippet names; the apps to add to INSTALLED_APPS
    (kinetis_queue and the stubs' packages, less what the snippet adds itself)."""
    namespace: dict[str, Any] = {
        "INSTALLED_APPS": [],
        "DATABASES": {"default": {}},
        "MIDDLEWARE": [],
    }  # as startproject
    exec(compile(snippet.body, str(snippet), "exec"), namespace)
    queue_settings = namespace.get("KINETIS_QUEUE", {})
    packages = [_write_stub(project, m, None) for m in queue_settings.get("IMPORTS", [])]
    for entry in queue_settings.get("SCHEDULE", {}).values():
        packages.append(_write_stub(project, entry["JOB"], entry.get("ARGS", {})))
    packages += [_write_stub(project, path, None, middleware=True) for path in queue_settings.get("MIDDLEWARE", [])]
    return [a for a in ["kinetis_queue", *sorted({p for p in packages if p})] if a not in namespace["INSTALLED_APPS"]]


@pytest.mark.parametrize("python", PYTHONS, ids=lambda p: "this-django" if p == sys.executable else p)
@pytest.mark.parametrize("snippet", SETTINGS, ids=str)
def test_the_settings_snippet_works_in_a_new_project(
    snippet: Snippet,
    python: str,
    new_projects: dict[str, tuple[Path, str]],
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
) -> None:
    new_project, version = _new_project(new_projects, python, tmp_path_factory)
    if not _applies(snippet, version):
        pytest.skip(f"the snippet is for {snippet.target}; this is Django {version}")
    project = tmp_path / "project"
    shutil.copytree(new_project, project)
    apps = _reader_modules(project, snippet)
    settings = project / "mysite" / "settings.py"
    with settings.open("a", encoding="utf-8") as f:
        f.write(f"\nINSTALLED_APPS += {apps!r}\n\n{snippet.body}")
    checked = _run([python, "manage.py", "check"], cwd=project)
    assert checked.returncode == 0, f"{snippet}\n{checked.stdout}\n{checked.stderr}"
    assert "ERROR" not in checked.stderr and "Traceback" not in checked.stderr, checked.stderr


def test_every_settings_block_of_the_docs_is_marked() -> None:
    """A block of settings (an upper-case name assigned at the top level) runs here or in the tutorial."""
    unmarked = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for fence in _PYTHON_FENCE.finditer(text):
            if fence["marker"] is None and _SETTING.search(fence["body"]):
                unmarked.append(f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, fence.start()) + 1}")
    assert not unmarked, f"settings blocks without a '<!-- test: settings -->' marker: {unmarked}"
