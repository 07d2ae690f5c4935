"""Deployment checks (manage.py check --deploy) on settings the plain checks already reject: one error each,
no warning built on a setting that does not load, and no crash."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.checks import run_checks
from django.test import override_settings


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("not a dict", [("kinetis_queue.E001", "KINETIS_QUEUE must be a dict")]),
        (
            {
                "DEFAULT_CONNECTION": "sqlite",
                "CONNECTIONS": {
                    "sqlite": {"BACKEND": "sql", "DATABASE": "postgres"},
                    "custom": {"BACKEND": "tests.jobs.Noop", "TIMEOUT": 600},
                },
            },
            [
                (
                    "kinetis_queue.E003",
                    "KINETIS_QUEUE['CONNECTIONS']['custom']['BACKEND'] does not name a Queue subclass",
                )
            ],
        ),
    ],
    ids=["unloadable-settings", "backend-not-a-queue"],
)
def test_deploy_checks_leave_a_bad_setting_to_its_one_error(setting: Any, expected: list[tuple[str, str]]) -> None:
    with override_settings(KINETIS_QUEUE=setting):
        found = [(e.id, e.msg) for e in run_checks(include_deployment_checks=True) if e.id.startswith("kinetis_queue")]
    assert found == expected
