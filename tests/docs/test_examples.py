"""Every example the docs mark as runnable runs (issue 21): the docs cannot rot silently.

A page's ``<!-- test: run -->`` blocks run in order in one fresh module (so a class an example defines is a
real, importable job class, as in an app's jobs.py), against one SQL connection named ``default`` on the test
database; rows they write are deleted afterwards. A ``<!-- test: settings -->`` block runs alone, and the
``KINETIS_QUEUE`` it defines must pass the same validation as ``manage.py check`` (kinetis_queue.E001). The
tutorial's file and shell steps run in tests/packaging/test_wheel.py, on the built wheel.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest
from django.apps import apps
from django.test import override_settings

from kinetis_queue import conf
from kinetis_queue import connections as queue_connections
from tests.docs.snippets import Snippet, pages, snippets

#: The connection the runnable examples use: what the README's quickstart configures.
EXAMPLE_SETTINGS = {
    "CONNECTIONS": {"default": {"BACKEND": "sql", "DATABASE": "default"}},
    "MAX_ATTEMPTS": 3,
    "HISTORY": False,  # as in tests/settings.py: no per-minute rows beside the examples' own writes
}

ALL = [s for page in pages() for s in snippets(page)]
RUN_PAGES = sorted({s.page for s in ALL if s.action == "run"})
#: The settings examples that set KINETIS_QUEUE on the test project's databases (every settings example also
#: runs in a new project: tests/docs/test_settings_snippets.py).
SETTINGS = [s for s in ALL if s.action == "settings" and "KINETIS_QUEUE =" in s.body and "DATABASES" not in s.body]


def test_examples_are_marked() -> None:
    """The count the docs promise (docs/index.md): a marker lost in an edit shows here."""
    counts = {a: sum(s.action == a for s in ALL) for a in ("run", "settings", "sh", "write", "append")}
    tutorial_steps = counts["sh"] + counts["write"] + counts["append"]
    assert counts["run"] >= 8 and counts["settings"] >= 7 and tutorial_steps >= 7, counts


@pytest.fixture
def clean_tables() -> Iterator[None]:
    """Delete every row of the app's tables that the examples added (the test database is shared by a worker)."""
    models = list(apps.get_app_config("kinetis_queue").get_models())
    before = {m: set(m._default_manager.values_list("pk", flat=True)) for m in models}
    yield
    for model in models:
        model._default_manager.exclude(pk__in=before[model]).delete()


@pytest.mark.parametrize("page", RUN_PAGES)
def test_the_page_examples_run(page: str, clean_tables: None) -> None:
    name = "docs_examples_" + "".join(c if c.isalnum() else "_" for c in page)
    module = types.ModuleType(name)
    sys.modules[name] = module
    try:
        # The module stands for an app's jobs module, which a worker imports: listed so push() accepts its classes.
        with override_settings(KINETIS_QUEUE={**EXAMPLE_SETTINGS, "IMPORTS": [name]}):
            for snippet in (s for s in ALL if s.page == page and s.action == "run"):
                _exec(snippet, module.__dict__)
            queue_connections.queues.dispose_all()
    finally:
        del sys.modules[name]


@pytest.mark.parametrize("snippet", SETTINGS, ids=str)
def test_the_settings_examples_validate(snippet: Snippet) -> None:
    namespace: dict[str, Any] = {"INSTALLED_APPS": []}  # as a new project's settings have it
    _exec(snippet, namespace)
    assert "KINETIS_QUEUE" in namespace, f"{snippet}: defines no KINETIS_QUEUE"
    with override_settings(KINETIS_QUEUE=namespace["KINETIS_QUEUE"]):
        conf.load()


def _exec(snippet: Snippet, namespace: dict[str, Any]) -> None:
    code = compile("\n" * (snippet.line) + snippet.body, f"docs/{snippet.page}", "exec")
    exec(code, namespace)  # the docs' own text, run as a reader would run it
