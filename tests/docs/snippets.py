"""The examples of docs/*.md (and the README) that tests run, found by the HTML comment before each fence.

The comment is invisible on the site and on GitHub. ``<!-- test: run -->`` marks a Python example that runs
as it is (tests/docs/test_examples.py), in one module per page, in page order; ``<!-- test: settings -->`` a
settings example whose ``KINETIS_QUEUE`` must validate. The tutorial's steps are files and commands:
``<!-- test: write PATH -->`` and ``<!-- test: append PATH -->`` put a block's text in a file of the project,
``<!-- test: sh -->`` runs a block in bash (tests/packaging/test_wheel.py, in a fresh virtualenv holding the
built wheel).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"

_MARKED = re.compile(
    r"^<!-- test: (?P<action>run|settings|sh|write|append)(?: (?P<target>\S+))? -->\n"
    r"```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)
_MARKER = re.compile(r"^<!-- test:", re.MULTILINE)


@dataclass(frozen=True)
class Snippet:
    """One marked code block: what to do with it, its target file (write/append), its text and where it is."""

    page: str
    line: int
    action: str
    target: str | None
    lang: str
    body: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def snippets(page: Path) -> list[Snippet]:
    """The marked blocks of one page, in order; a marker not followed by a fence is an error, not a skip."""
    text = page.read_text(encoding="utf-8")
    found = [
        Snippet(
            page=page.name if page.parent == DOCS.parent else str(page.relative_to(DOCS)),
            line=text.count("\n", 0, m.start()) + 1,
            action=m["action"],
            target=m["target"],
            lang=m["lang"],
            body=m["body"],
        )
        for m in _MARKED.finditer(text)
    ]
    markers = len(_MARKER.findall(text))
    if markers != len(found):
        raise AssertionError(f"{page}: {markers} '<!-- test:' markers but {len(found)} marked code blocks")
    return found


def pages() -> list[Path]:
    """Every page of the site, and the README (its quickstart is an example too)."""
    return [*sorted(DOCS.rglob("*.md")), DOCS.parent / "README.md"]
