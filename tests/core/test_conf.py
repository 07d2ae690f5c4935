"""The KINETIS_QUEUE setting, connection wiring, and the system check (DESIGN.md §5)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path
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
    with override_settings(
        KINETIS_QUEUE={
            "CONNECTIONS": {"a": {"BACKEND": "sql"}, "b": {"BACKEND": "sql", "VISIBILITY_TIMEOUT": 7}},
            "DEFAULT_CONNECTION": "a",
            "VISIBILITY_TIMEOUT": 42,
            "MAX_ATTEMPTS": 4,
        }
    ):
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

    custom = {"BACKEND": "tests.support.custom_backends.NotClearable"}
    with override_settings(KINETIS_QUEUE=setting(odd=custom)):
        with pytest.raises(QueueNotClearableError, match="'odd' uses the notclearable backend"):
            queues.clearable()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"COLOUR": "green"}, "KINETIS_QUEUE['CONNECTIONS']['own']['COLOUR'] must be 'red' or 'blue'"),
        ({"LIMIT": 11}, "KINETIS_QUEUE['CONNECTIONS']['own']['LIMIT'] must be at least 1 and at most 10"),
        (
            {"SHADE": 1},
            "KINETIS_QUEUE['CONNECTIONS']['own']['SHADE'] is not a setting of the "
            "tests.support.custom_backends.WithOptions backend (known: BACKEND, COLOUR, LIMIT, "
            "MAX_ATTEMPTS, OUTBOX, OUTBOX_ALWAYS, OUTBOX_POLL, OUTBOX_WARN, POLL_TIMEOUT, RETRY_BASE_DELAY, TIMEOUT, "
            "VISIBILITY_TIMEOUT)",
        ),
        (
            {"VISIBILITY_TIMEOUT": 601},
            "KINETIS_QUEUE['CONNECTIONS']['own']['VISIBILITY_TIMEOUT'] must be at least 1 and at most 600",
        ),
    ],
)
def test_a_custom_backend_with_a_settings_schema_has_its_keys_checked(entry: dict[str, Any], message: str) -> None:
    """The custom-backend contract: a Queue class's settings_schema is applied as a built-in backend's is."""
    own = {"BACKEND": "tests.support.custom_backends.WithOptions", **entry}
    with override_settings(KINETIS_QUEUE=setting(own=own)):
        with pytest.raises(QueueConfigurationError) as raised:
            conf.load()
    assert str(raised.value) == message


def test_a_custom_backend_gets_its_options_with_defaults_filled_in() -> None:
    custom = {"BACKEND": "tests.support.custom_backends.WithOptions", "LIMIT": 3}
    with override_settings(KINETIS_QUEUE={**setting(own=custom), "VISIBILITY_TIMEOUT": 900}):
        with pytest.raises(
            QueueConfigurationError,
            match=r"\['VISIBILITY_TIMEOUT'\] must be at most 600 for the "
            r"tests\.support\.custom_backends\.WithOptions backend",
        ):
            conf.load()
    with override_settings(KINETIS_QUEUE=setting(own=custom)):
        assert conf.connection_settings("own").options == {"COLOUR": "blue", "LIMIT": 3}
    schemaless = {"BACKEND": "tests.support.custom_backends.NotClearable", "ANYTHING": [1]}
    with override_settings(KINETIS_QUEUE=setting(own=schemaless)):
        assert conf.connection_settings("own").options == schemaless  # no schema: the entry as written


#: Run in a process where the client libraries cannot be imported, as on a core-only install.
CORE_ONLY = textwrap.dedent("""
    import sys
    for name in ("redis", "boto3", "botocore", "amqp"):
        sys.modules[name] = None  # import raises ImportError
    import django
    django.setup()
    from django.core.checks import run_checks
    from django.test import override_settings
    from kinetis_queue import conf
    from kinetis_queue.exceptions import QueueConfigurationError

    bad = {"redis": {"URL": "redis://h", "PREFIX": 3}, "sqs": {"QUEUE_PREFIX": "a.b"}, "rabbitmq": {"HEARTBEAT": -1}}
    for backend, entry in bad.items():
        with override_settings(KINETIS_QUEUE={"CONNECTIONS": {"a": {"BACKEND": backend, **entry}}}):
            try:
                conf.load()
            except QueueConfigurationError as exc:
                print(exc)
    good = {"a": {"BACKEND": "redis", "URL": "redis://h"}, "b": {"BACKEND": "sqs"}, "c": {"BACKEND": "rabbitmq"}}
    with override_settings(KINETIS_QUEUE={"DEFAULT_CONNECTION": "a", "CONNECTIONS": good}):
        print(sorted(m.id for m in run_checks() if m.id.startswith("kinetis_queue.E00")))
""")


def test_settings_are_checked_without_any_client_library() -> None:
    """A core-only install still checks every backend's keys, naming them, and reports each missing library
    as E002: a backend's settings schema lives in a module that imports no client library."""
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "KINETIS_TESTS_SUBPROCESS": "1",
        "PYTHONPATH": str(root),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
    }
    result = subprocess.run(
        [sys.executable, "-c", CORE_ONLY], env=env, cwd=root, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "KINETIS_QUEUE['CONNECTIONS']['a']['PREFIX'] must be a string (prepended to every key)",
        "KINETIS_QUEUE['CONNECTIONS']['a']['QUEUE_PREFIX'] must be at most 79 letters, digits, '-' or '_'",
        "KINETIS_QUEUE['CONNECTIONS']['a']['HEARTBEAT'] must be at least 0 and at most 65535",
        "['kinetis_queue.E002', 'kinetis_queue.E002', 'kinetis_queue.E002']",
    ]


@pytest.mark.parametrize("backend", list(conf.builtin_backends()))
def test_each_builtin_backend_is_checked_with_the_schema_its_class_declares(backend: str) -> None:
    """One schema per backend: what conf.py applies is the Queue class's own settings_schema."""
    declared = conf.builtin_backends()[backend]
    path, client = declared.queue_class, declared.client
    if client is not None:
        pytest.importorskip(client)
    module_name, _, class_name = path.rpartition(".")
    cls = getattr(importlib.import_module(module_name), class_name)
    assert cls.settings_schema is not None
    assert cls.settings_schema is conf.backend_options(backend)
