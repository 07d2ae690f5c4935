"""Every KINETIS_QUEUE key the code accepts is explained in the docs (issue 21): a key added to a backend's
schema, or to conf.py, without a word on its page fails here. The keys come from the same function that
generates the settings reference (scripts/docs_hooks.py)."""

from __future__ import annotations

import importlib.util

import pytest

from tests.docs.snippets import DOCS

_spec = importlib.util.spec_from_file_location("docs_hooks", DOCS.parent / "scripts" / "docs_hooks.py")
assert _spec and _spec.loader
docs_hooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docs_hooks)

#: The pages a key may be explained on, besides the settings reference.
FEATURE_PAGES = ("outbox.md", "observability.md", "schedules.md", "mail.md", "discovery.md")


def _pages_for(where: str) -> list[str]:
    backends = [b.strip() for b in where.removeprefix("connection:").split(",")] if ":" in where else []
    return ["reference/settings.md", *FEATURE_PAGES, *(f"backends/{b}.md" for b in backends)]


@pytest.mark.parametrize(("name", "where", "default"), docs_hooks.setting_keys(), ids=lambda v: str(v))
def test_every_setting_is_explained(name: str, where: str, default: object) -> None:
    pages = _pages_for(where)
    spellings = (f"`{name}`", f'"{name}"', f"['{name}']")  # the key alone, or as code writes it
    texts = {p: (DOCS / p).read_text(encoding="utf-8").split("<!-- generated")[0] for p in pages}
    explained = [p for p, text in texts.items() if any(s in text for s in spellings)]
    assert explained, f"{name} ({where}) is named on none of {pages}"
