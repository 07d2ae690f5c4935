"""Which task modules enqueue accepts (registry.discoverable) and how a stored task path is looked up."""

from __future__ import annotations

import sys

import pytest
from django.conf import settings
from django.test import override_settings

from kinetis_queue import conf
from kinetis_queue.contrib.tasks.compat import InvalidTask, task
from kinetis_queue.payload import registry
from tests import task_defs


def in_jobs_module() -> None:
    """Stands for a function of ``tests/jobs.py``: its module is the ``tests`` app's discovered jobs module."""


in_jobs_module.__module__ = "tests.jobs"


def test_a_task_of_an_installed_apps_jobs_module_is_accepted() -> None:
    """Discovery imports each installed app's jobs module, so a task defined there needs no IMPORTS entry."""
    assert "tests.jobs" not in conf.imports()
    accepted = task(in_jobs_module)
    assert accepted.module_path == "tests.jobs.in_jobs_module"


def test_an_invalid_imports_setting_makes_no_module_discoverable_beyond_the_apps() -> None:
    """A broken IMPORTS is check's to report (E001); enqueue still refuses a task only IMPORTS would list."""
    broken = {**settings.KINETIS_QUEUE, "IMPORTS": "tests.task_defs"}  # a string, not a list
    with override_settings(KINETIS_QUEUE=broken):
        with pytest.raises(InvalidTask, match="KINETIS_QUEUE\\['IMPORTS'\\]"):
            task(task_defs.add.func)
        assert task(in_jobs_module).module_path == "tests.jobs.in_jobs_module"


def test_lookup_finds_only_attributes_of_imported_modules() -> None:
    """A stored path resolves to an object only inside a module already imported, and never to a module."""
    assert "kinetis_never_imported" not in sys.modules
    assert registry.lookup("kinetis_never_imported.tasks.run") is registry.MISSING
    assert "kinetis_never_imported" not in sys.modules  # looking up imported nothing
    assert registry.lookup("tests.task_defs") is registry.MISSING
    assert registry.lookup("sys.maxsize.real") is registry.MISSING  # an int has no namespace to walk into
    assert registry.lookup("tests.task_defs.add") is task_defs.add
