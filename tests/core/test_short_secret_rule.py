"""The rule for Sensitive values too short to be replaced where they occur (issue 27 item 14;
kinetis_queue/payload/redaction.py, docs/job-arguments.md)."""

from __future__ import annotations

import pytest

from kinetis_queue.payload.redaction import REDACTED, WITHHELD, scrub, sensitive_values


@pytest.mark.parametrize(
    ("text", "secrets", "expected"),
    [
        ("could not use token k3y for x", ["k3y"], WITHHELD),
        ("header token=k3y;", ["k3y"], WITHHELD),
        ("quoted 'ab'", ["ab"], WITHHELD),
        ("a snake_k3y_name", ["k3y"], WITHHELD),  # an underscore is not a letter or a digit
        ("pin 7 refused", ["7"], WITHHELD),
        ('File "x.py", line 12, in handle', ["1"], 'File "x.py", line 12, in handle'),  # "1" only inside "12"
        ("the k3yboard broke", ["k3y"], "the k3yboard broke"),
        ("long s3cret here", ["s3cret", "cre"], f"long {REDACTED} here"),  # "cre" went with the long value
        ("long s3cret and k3y", ["s3cret", "k3y"], WITHHELD),
        ("nothing to hide", ["k3y", "s3cret"], "nothing to hide"),
    ],
)
def test_a_short_value_withholds_a_text_it_occurs_in_as_a_word(text: str, secrets: list[str], expected: str) -> None:
    assert scrub(text, secrets) == expected


def test_every_non_empty_sensitive_string_is_a_secret_whatever_its_length() -> None:
    values = sensitive_values("tests.operator_jobs.TakesSecret", {"label": "x", "token": "k3y", "credentials": ""})
    assert values == ["k3y"]  # the shown label is not one; an empty value hides nothing


def test_a_sensitive_number_is_a_secret_from_four_characters() -> None:
    """A payload's structure ("version": 1 in a queued email) would otherwise withhold every text with a 1."""
    credentials = {"version": 1, "pin": 7, "account": 123456, "rate": 0.25}
    values = sensitive_values(
        "tests.operator_jobs.TakesSecret", {"label": "x", "token": "t", "credentials": credentials}
    )
    assert values == ["123456", "0.25", "t"]
