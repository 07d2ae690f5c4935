"""Commands on a connection whose BACKEND is not a Queue: a CommandError naming the setting, nothing done."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

SETTING = {"DEFAULT_CONNECTION": "custom", "CONNECTIONS": {"custom": {"BACKEND": "tests.jobs.Noop"}}}


@pytest.mark.parametrize(
    "arguments",
    [["queue_clear", "--force"], ["queue_work", "--once"]],
    ids=["queue_clear", "queue_work"],
)
def test_a_backend_that_is_not_a_queue_is_named_before_anything_runs(arguments: list[str]) -> None:
    out = io.StringIO()
    with override_settings(KINETIS_QUEUE=SETTING), pytest.raises(CommandError) as raised:
        call_command(*arguments, "--connection=custom", stdout=out)
    assert "KINETIS_QUEUE['CONNECTIONS']['custom']['BACKEND']" in str(raised.value)
    assert "does not name a Queue subclass" in str(raised.value)
    assert out.getvalue() == ""
