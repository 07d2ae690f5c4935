"""The user docs stand alone: they never cite documents or tracker numbers a reader does not have.

A reader has the site, the README and the code. The project's design and reliability notes, its issue tracker's
numbers and its specification are not shipped, so "DESIGN.md §2" or "issue 14" sends a reader nowhere. The text
checked is every page (docs/, the README), what the build generates from the code (commands, checks, settings:
scripts/docs_hooks.py) and the docstrings mkdocstrings renders (each ``::: path`` of the pages, its members too).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.docs.snippets import DOCS, pages

_spec = importlib.util.spec_from_file_location("docs_hooks", DOCS.parent / "scripts" / "docs_hooks.py")
assert _spec and _spec.loader
docs_hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docs_hooks)

#: What a reader cannot follow: the unshipped notes, their section signs, tracker numbers, the spec's files.
UNSHIPPED = re.compile(
    r"\b(?:DESIGN|RELIABILITY)\.md\b|§\s*\d|\b[Ii]ssues?\s+#?\d+|\b[Ii]tems?\s+\d+\s+of\b|(?<![/.\w])spec/|\b000_\w+\.txt",
)
_DIRECTIVE = re.compile(r"^::: (\S+)", re.MULTILINE)


def _object(path: str) -> Any:
    """What a ``::: path`` directive names: a module, or an attribute of the longest importable prefix."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            found = getattr(found, name)
        return found
    raise AssertionError(f"{path}: nothing to import")


def _docstrings(obj: Any, name: str, depth: int = 0) -> Iterator[tuple[str, str]]:
    """(where, docstring) for ``obj`` and the members the reference renders with it (its own, not inherited)."""
    doc = inspect.getdoc(obj) if not isinstance(obj, property) else obj.__doc__
    if doc and (depth == 0 or getattr(obj, "__doc__", None) == doc or isinstance(obj, property)):
        yield name, doc
    if depth >= 2:
        return
    if inspect.ismodule(obj):
        members = {k: v for k, v in vars(obj).items() if getattr(v, "__module__", None) == obj.__name__}
    elif inspect.isclass(obj):
        members = dict(vars(obj))
    else:
        return
    for key, member in members.items():
        if key.startswith("_") and key != "__init__":
            continue
        member = getattr(member, "__func__", member)  # classmethod, staticmethod
        if inspect.isfunction(member) or inspect.isclass(member) or isinstance(member, property):
            yield from _docstrings(member, f"{name}.{key}", depth + 1)


def _texts() -> Iterator[tuple[str, str]]:
    for page in pages():
        text = page.read_text(encoding="utf-8")
        yield str(page.relative_to(DOCS.parent)), text
        for path in _DIRECTIVE.findall(text):
            yield from _docstrings(_object(path), path)
    for name, generate in docs_hooks.GENERATORS.items():
        yield f"generated {name}", generate()
    changelog = DOCS.parent / "CHANGELOG.md"  # shipped in the sdist: a reader has it too
    yield changelog.name, changelog.read_text(encoding="utf-8")


def _findings(texts: Iterator[tuple[str, str]]) -> list[str]:
    found = []
    for where, text in texts:
        for number, line in enumerate(text.splitlines(), 1):
            for match in UNSHIPPED.finditer(line):
                found.append(f"{where}:{number}: {match.group()!r} in {line.strip()[:120]!r}")
    return found


def test_the_docs_cite_nothing_a_reader_does_not_have() -> None:
    found = _findings(_texts())
    assert not found, "the docs cite what a reader does not have:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "text",
    ["(DESIGN.md §2)", "see RELIABILITY.md", "before issue 19", "issue 14's bench", "item 3 of the note", "spec/x"],
)
def test_the_rule_sees_each_kind_of_reference(text: str) -> None:
    """The pattern catches what it is for (a rule that matches nothing would pass on any docs)."""
    assert _findings(iter([("example", text)]))
