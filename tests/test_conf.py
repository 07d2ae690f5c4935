"""The KINETIS_QUEUE setting, connection wiring, and the system check (DESIGN.md §5)."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from django.core.checks import run_checks
from django.test import override_settings

from kinetis_queue import conf, queue, queues
from kinetis_queue.backends.sql import SqlQueue
from kinetis_queue.backends.sync import SyncQueue
from kinetis_queue.exceptions import QueueConfigurationError, QueueNotClearableError, QueueUnavailableError
from tests.jobs import Noop


def setting(**connections_: Any) -> dict[str, Any]:
    return {"DEFAULT_CONNECTION": next(iter(connections_)), "CONNECTIONS": connections_}


@pytest.mark.parametrize(
    ("value", "key"),
    [
        ({"CONNECTIONS": {}}, "['CONNECTIONS']"),
        ({"CONNECTIONS": {"Bad": {"BACKEND": "sync"}}}, "['CONNECTIONS']"),
        ({"CONNECTIONS": {"a": {"BACKEND": "nope"}}}, "['CONNECTIONS']['a']['BACKEND']"),
        ({"CONNECTIONS": {"a": {}}}, "['CONNECTIONS']['a']['BACKEND']"),
        ({"CONNECTIONS": {"a": {"BACKEND": "sql", "DATABASE": "missing"}}}, "['CONNECTIONS']['a']['DATABASE']"),
        ({"CONNECTIONS": {"a": {"BACKEND": "sql", "URL": "x"}}}, "['CONNECTIONS']['a']['URL']"),
        ({"CONNECTIONS": {"a": {"BACKEND": "sql", "VISIBILITY_TIMEOUT": 0}}}, "['VISIBILITY_TIMEOUT']"),
        ({"CONNECTIONS": {"a": {"BACKEND": "sqs", "VISIBILITY_TIMEOUT": 43201}}}, "['VISIBILITY_TIMEOUT']"),
        ({"CONNECTIONS": {"a": {"BACKEND": "sync"}}, "MAX_ATTEMPTS": -1}, "['MAX_ATTEMPTS']"),
        ({"CONNECTIONS": {"a": {"BACKEND": "sync"}}, "RETRY_BASE_DELAY": 901}, "['RETRY_BASE_DELAY']"),
        ({"CONNECTIONS": {"a": {"BACKEND": "sync"}}, "POLL_TIMEOUT": 0}, "['POLL_TIMEOUT']"),
        ({"CONNECTIONS": {"a": {"BACKEND": "sync"}}, "POLL_TIMEOUT": True}, "['POLL_TIMEOUT']"),
        ({"CONNECTIONS": {"a": {"BACKEND": "sync"}}, "DEFAULT_CONNECTION": "b"}, "['DEFAULT_CONNECTION']"),
        ({"CONNECTIONS": {"a": {"BACKEND": "sync"}}, "TYPO": 1}, "['TYPO']"),
    ],
)
def test_a_bad_setting_is_rejected_naming_its_key(value: dict[str, Any], key: str) -> None:
    with override_settings(KINETIS_QUEUE=value):
        with pytest.raises(QueueConfigurationError) as raised:
            conf.load()
        assert key in str(raised.value)
        errors = run_checks()
    assert [e.id for e in errors if e.id.startswith("kinetis_queue")] == ["kinetis_queue.E001"]


def test_shared_keys_default_from_the_top_level() -> None:
    with override_settings(KINETIS_QUEUE={
        "CONNECTIONS": {"a": {"BACKEND": "sql"}, "b": {"BACKEND": "sql", "VISIBILITY_TIMEOUT": 7}},
        "DEFAULT_CONNECTION": "a", "VISIBILITY_TIMEOUT": 42, "MAX_ATTEMPTS": 4,
    }):
        loaded = conf.load()
        assert loaded.connections["a"].visibility_timeout == 42
        assert loaded.connections["b"].visibility_timeout == 7
        assert loaded.connections["b"].max_attempts == 4
        built = queues["b"]
        assert isinstance(built, SqlQueue) and built.visibility_timeout() == 7


def test_without_a_setting_the_default_is_sql_on_the_default_database() -> None:
    with override_settings():
        from django.conf import settings

        del settings.KINETIS_QUEUE
        assert isinstance(queues.default(), SqlQueue)


def test_queue_is_the_default_connection_and_follows_override_settings() -> None:
    with override_settings(KINETIS_QUEUE=setting(inline={"BACKEND": "sync"})):
        assert isinstance(queues.default(), SyncQueue)
        assert queues["inline"] is queues["inline"]  # built once
        queue.push(Noop())  # the proxy reaches the sync connection: runs inline
    assert isinstance(queues.default(), SqlQueue)


def test_a_missing_client_library_names_the_pip_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)
    with override_settings(KINETIS_QUEUE=setting(aws={"BACKEND": "sqs", "REGION": "eu-west-1"})):
        with pytest.raises(QueueUnavailableError) as raised:
            queues["aws"]
    assert "'aws'" in str(raised.value)
    assert "pip install 'kinetis-queue[sqs]'" in str(raised.value)


def test_a_dotted_path_backend_must_be_a_queue() -> None:
    with override_settings(KINETIS_QUEUE=setting(custom={"BACKEND": "tests.jobs.Noop"})):
        with pytest.raises(QueueConfigurationError, match="does not name a Queue subclass"):
            queues["custom"]
    with override_settings(KINETIS_QUEUE=setting(custom={"BACKEND": "kinetis_queue.backends.sync.SyncQueue"})):
        assert isinstance(queues["custom"], SyncQueue)


def test_clearable_returns_a_clearable_queue_or_names_the_backend() -> None:
    assert isinstance(queues.clearable("sqlite"), SqlQueue)

    custom = {"BACKEND": "tests.custom_backends.NotClearable"}
    with override_settings(KINETIS_QUEUE=setting(odd=custom)):
        with pytest.raises(QueueNotClearableError, match="'odd' uses the notclearable backend"):
            queues.clearable()
