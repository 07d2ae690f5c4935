"""The layout tree of docs/contributing.md (moved from the README) names every module and package of
kinetis_queue's top level, so that a new module cannot land unexplained (tests/core/test_layout.py checks
the import arrows the tree describes)."""

from __future__ import annotations

import re
from pathlib import Path

import kinetis_queue
from tests.docs.snippets import DOCS

PACKAGE = Path(kinetis_queue.__file__).resolve().parent
#: Directories of the package that hold no Python of the layout's concern.
NOT_CODE = {"migrations", "templates", "static", "__pycache__"}


def _layout_tree() -> str:
    text = (DOCS / "contributing.md").read_text(encoding="utf-8")
    section = text.split("\n## Layout\n", 1)[1]
    match = re.search(r"^```\n(kinetis_queue/\n.*?)^tests/$", section, re.MULTILINE | re.DOTALL)
    assert match, "docs/contributing.md: the Layout section has no kinetis_queue/ tree"
    return match[1]


def test_the_layout_names_every_top_level_module_and_package() -> None:
    tree = _layout_tree()
    named = set(re.findall(r"^  (\w+(?:\.py|/))", tree, re.MULTILINE))
    modules = {p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    packages = {f"{p.name}/" for p in PACKAGE.iterdir() if p.is_dir() and p.name not in NOT_CODE}
    assert sorted((modules | packages) - named) == []
    assert sorted(named - (modules | packages) - {"management/"}) == []
