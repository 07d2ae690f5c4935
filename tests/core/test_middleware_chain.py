"""The middleware chain's own rules (kinetis_queue.middleware): the order of send(), the options a push may name,
and a MIDDLEWARE setting that names no middleware."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from django.conf import settings
from django.core import checks

from kinetis_queue import conf, connections, middleware
from kinetis_queue.contracts import PreparedPush, Queue
from kinetis_queue.exceptions import InvalidQueueArgumentError, QueueConfigurationError
from kinetis_queue.middleware import DEFAULT_MIDDLEWARE, Middleware, PushChain, PushDraft, Store
from tests import jobs

CALLS: list[str] = []


class Outer(Middleware):
    def send(self, queue: Queue, prepared: Sequence[PreparedPush], store: Store) -> list[str]:
        CALLS.append("outer in")
        ids = store(prepared)
        CALLS.append("outer out")
        return ids


class Inner(Middleware):
    options = frozenset({"colour"})

    def prepare(self, draft: PushDraft) -> None:
        CALLS.append(f"prepare {draft.options.get('colour')}")

    def send(self, queue: Queue, prepared: Sequence[PreparedPush], store: Store) -> list[str]:
        CALLS.append("inner")
        return store(prepared)


@pytest.fixture
def chain_setting(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Set KINETIS_QUEUE["MIDDLEWARE"] in place (no setting_changed) and read the chain again, before and after."""

    def use(paths: Any) -> None:
        monkeypatch.setitem(settings.KINETIS_QUEUE, "MIDDLEWARE", paths)
        middleware.forget()

    CALLS.clear()
    yield use
    monkeypatch.undo()
    middleware.forget()


def test_send_runs_the_first_middleware_outermost_then_the_store() -> None:
    queue = connections.build("sqlite")
    chain = PushChain([Outer(), Inner()])

    def store(prepared: Sequence[PreparedPush]) -> list[str]:
        CALLS.append("store")
        return [item.id for item in prepared]

    CALLS.clear()
    prepared = PreparedPush(queue.prepare(jobs.Noop()).envelope, 0, "default")
    assert chain.send(queue, [prepared], store) == [prepared.id]
    assert CALLS == ["outer in", "inner", "store", "outer out"]


def test_a_middleware_option_reaches_its_prepare_and_an_unknown_one_is_refused() -> None:
    chain = PushChain([Outer(), Inner()])
    queue = connections.build("sqlite")
    CALLS.clear()
    draft = PushDraft(queue, jobs.Noop(), "tests.jobs.Noop", {}, "default", {"colour": "blue"}, {})
    chain.prepare(draft)
    assert CALLS == ["prepare blue"]
    with pytest.raises(InvalidQueueArgumentError, match="push option 'size' is taken by no middleware"):
        chain.prepare(PushDraft(queue, jobs.Noop(), "tests.jobs.Noop", {}, "default", {"size": 3}, {}))


def test_without_the_unique_middleware_a_unique_option_is_refused_before_any_io(chain_setting: Any) -> None:
    chain_setting([path for path in DEFAULT_MIDDLEWARE if not path.endswith("UniqueMiddleware")])
    queue = connections.build("sqlite")
    with pytest.raises(InvalidQueueArgumentError, match="push option 'unique_key' is taken by no middleware"):
        queue.push(jobs.Noop(), queue="q-unique-off", unique_key="k")
    assert queue.size("q-unique-off") == 0


@pytest.mark.parametrize(
    ("entry", "problem"),
    [
        ("tests.nowhere.Middleware", "cannot be imported"),
        ("tests.jobs.Noop", "is not a subclass of kinetis_queue.middleware.Middleware"),
    ],
)
def test_a_middleware_entry_that_names_no_middleware_is_check_e011_and_raised_at_use(
    chain_setting: Any, entry: str, problem: str
) -> None:
    chain_setting([*DEFAULT_MIDDLEWARE, entry])
    found = [message for message in checks.run_checks() if message.id == "kinetis_queue.E011"]
    assert len(found) == 1, found
    where = f"KINETIS_QUEUE['MIDDLEWARE'][{len(DEFAULT_MIDDLEWARE)}]"
    assert found[0].msg.startswith(f"{where}: {entry!r} ") and problem in found[0].msg
    with pytest.raises(QueueConfigurationError, match=re.escape(where)):
        middleware.push_chain()


@pytest.mark.parametrize("value", ["kinetis_queue.unique.UniqueMiddleware", [""], [3]])
def test_a_middleware_setting_of_the_wrong_shape_is_refused_by_the_settings(chain_setting: Any, value: Any) -> None:
    chain_setting(value)
    with pytest.raises(QueueConfigurationError, match=r"KINETIS_QUEUE\['MIDDLEWARE'\]"):
        conf.load()
