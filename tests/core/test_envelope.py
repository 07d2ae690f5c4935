"""The stored envelope's strict JSON: corrupt data is MalformedQueuedJobDataError, never another exception."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kinetis_queue.exceptions import MalformedQueuedJobDataError
from kinetis_queue.payload.envelope import (
    Envelope,
    decode_body,
    decode_envelope,
    dumps,
    encode_body,
    envelope_from_body,
    loads,
    new_envelope,
)

GOOD = new_envelope("tests.jobs.Records", {"label": "x", "items": [1, 2.5, None, True, {"k": "é"}]}, 3, {"t": 1})


def test_an_envelope_round_trips_exactly() -> None:
    decoded = decode_envelope(GOOD.to_json())
    assert decoded == GOOD
    assert isinstance(decoded, Envelope)
    assert GOOD.to_json().isascii()  # non-ASCII travels escaped


@pytest.mark.parametrize(
    "text",
    [
        "NaN",
        "[Infinity]",
        "[-Infinity]",
        "1e400",
        '{"a": 1, "a": 2}',
        "[" * 100_000,
        "[" * 50 + "]" * 50 + "x",
        "",
        "{",
        b"\xff\xfe",
        "{'a': 1}",
    ],
    ids=[
        "nan",
        "infinity",
        "minus-infinity",
        "overflow",
        "duplicate-key",
        "runaway-nesting",
        "trailing",
        "empty",
        "truncated",
        "not-utf8",
        "single-quotes",
    ],
)
def test_strict_json_rejects(text: str | bytes) -> None:
    with pytest.raises(MalformedQueuedJobDataError):
        loads(text)


def _mutated(**changes: object) -> str:
    data = {
        "id": GOOD.id,
        "pushedAt": GOOD.pushed_at,
        "class": GOOD.job_class,
        "args": GOOD.args,
        "attempts": 0,
        "maxAttempts": None,
        "metadata": {},
    }
    data.update(changes)
    return dumps({k: v for k, v in data.items() if v is not _DROP})


_DROP = object()


def _nested(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    "text",
    [
        _mutated(id="XYZ"),
        _mutated(id=_DROP),
        _mutated(extra=1),
        _mutated(attempts=-1),
        _mutated(attempts=2**40),
        _mutated(attempts=1.0),
        _mutated(attempts=True),
        _mutated(maxAttempts=-1),
        _mutated(pushedAt="yesterday"),
        _mutated(args=[]),
        _mutated(args={"deep": _nested(33)}),
        _mutated(args={"s": "\ud800"}),
        _mutated(metadata=None),
        _mutated(**{"class": ""}),
        "[]",
    ],
    ids=[
        "bad-id",
        "missing-id",
        "extra-key",
        "negative-attempts",
        "huge-attempts",
        "float-attempts",
        "bool-attempts",
        "negative-cap",
        "bad-pushed-at",
        "args-not-object",
        "args-too-deep",
        "lone-surrogate",
        "metadata-not-object",
        "empty-class",
        "not-an-object",
    ],
)
def test_a_wrongly_shaped_envelope_is_malformed(text: str) -> None:
    with pytest.raises(MalformedQueuedJobDataError):
        decode_envelope(text)


def test_32_levels_of_nesting_are_accepted() -> None:
    value = _nested(32)
    decoded = decode_envelope(_mutated(args={"v": value}))
    assert decoded.args == {"v": value}


def test_the_sqs_and_rabbitmq_message_body_round_trips_without_the_counters() -> None:
    body = encode_body(GOOD)

    assert body.isascii()
    assert loads(body).keys() == {"id", "pushedAt", "class", "args"}  # attempts, maxAttempts, metadata travel beside
    assert envelope_from_body(decode_body(body.encode()), 2, 3, {"t": 1}) == replace(GOOD, attempts=2)


@pytest.mark.parametrize(
    "body",
    [dumps({"id": GOOD.id}), GOOD.to_json(), "[]", "null", "{"],
    ids=["missing-keys", "whole-envelope", "list", "null", "truncated"],
)
def test_a_message_body_without_exactly_its_four_keys_is_malformed(body: str) -> None:
    with pytest.raises(MalformedQueuedJobDataError):
        decode_body(body)
