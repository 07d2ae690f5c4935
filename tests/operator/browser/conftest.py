"""The browser tests' fixtures: Django's live server for a module, and one headless Chromium for it
(support.py has the rest)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.staticfiles.handlers import StaticFilesHandler
from django.test import override_settings
from django.test.testcases import LiveServerThread

from tests.operator.test_admin import STATUS_SETTINGS


@pytest.fixture(scope="module")
def live_url(request: pytest.FixtureRequest, django_db_setup: None) -> Iterator[str]:
    """Django's live server (with the static files handler) on a free port, for this module; KINETIS_QUEUE is
    the module's LIVE_SETTINGS when it has them, else the status page's STATUS_SETTINGS."""
    thread = LiveServerThread("127.0.0.1", StaticFilesHandler)
    thread.daemon = True
    thread.start()
    thread.is_ready.wait()
    if thread.error is not None:
        raise thread.error
    chosen = getattr(request.module, "LIVE_SETTINGS", STATUS_SETTINGS)
    settings = override_settings(ALLOWED_HOSTS=["127.0.0.1", "testserver"], KINETIS_QUEUE=chosen)
    settings.enable()
    try:
        yield f"http://127.0.0.1:{thread.port}"
    finally:
        settings.disable()
        thread.terminate()
        thread.join()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One headless Chromium for the module."""
    from tests.operator.browser.support import start_chromium

    driver = start_chromium()
    try:
        yield driver
    finally:
        driver.quit()
