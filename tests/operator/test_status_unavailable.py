"""queue_status when a connection cannot even be built: its row says so, the others are still shown."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings


def test_a_connection_that_cannot_be_built_is_reported_beside_the_others(queue_name: str) -> None:
    setting = {
        "DEFAULT_CONNECTION": "sync",
        "CONNECTIONS": {"sync": {"BACKEND": "sync"}, "custom": {"BACKEND": "tests.jobs.Noop"}},
    }
    out, err = io.StringIO(), io.StringIO()
    with override_settings(KINETIS_QUEUE=setting), pytest.raises(CommandError) as raised:
        call_command("queue_status", f"--queue={queue_name}", "--no-color", stdout=out, stderr=err)
    assert str(raised.value) == "figures unavailable for connection(s) custom"
    rows = [line.split() for line in out.getvalue().splitlines()]
    assert ["sync", "sync", queue_name, "0", "0", "0", "0", "0", "no"] in rows
    assert ["custom", "tests.jobs.Noop", "(unavailable)"] in rows
    assert err.getvalue().startswith("custom: QueueConfigurationError: ")
    assert "does not name a Queue subclass" in err.getvalue()
