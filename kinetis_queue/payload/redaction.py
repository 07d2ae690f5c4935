"""Every rule about ``Sensitive`` job arguments: what logs, signals, the admin and ``queue_failed`` may show.

A job argument annotated ``Annotated[..., Sensitive]`` (kinetis_queue.job), and any argument whose
class or annotation cannot be told, is shown as ``[redacted]``; its value, found anywhere in an
exception's text, is replaced by ``[redacted]`` too. A string shorter than MIN_SCRUBBED_LENGTH is not
replaced where it occurs (every "ab" of a traceback would go): a text in which it occurs as a word of
its own is withheld whole (WITHHELD). A number that short is not searched for at all. The
django.tasks backend (``RunTask``) and the queued receivers declare their whole payload Sensitive,
so these rules hide it everywhere. Every place that shows a job's arguments or an exception's text
about a job calls this module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

from kinetis_queue.contracts import QueuedJob
from kinetis_queue.job import Job
from kinetis_queue.payload.envelope import decode_args, dumps, loads
from kinetis_queue.payload.registry import resolve_job_class
from kinetis_queue.payload.serializer import shown_parameters, typed_parameters

if TYPE_CHECKING:
    from kinetis_queue.models import FailedJob

#: What a Sensitive argument (or any argument that cannot be classified) is shown as.
REDACTED: Final = "[redacted]"
#: A Sensitive value shorter than this is not replaced where it occurs in exception text (every "1"
#: or "ab" of a traceback would go): a text that contains one is withheld whole instead (WITHHELD).
MIN_SCRUBBED_LENGTH: Final = 4
#: What an exception's message or traceback becomes when a Sensitive value too short to be replaced
#: occurs in it as a word of its own (the exception's class is still recorded and logged).
WITHHELD: Final = (
    f"[withheld: the text contains a Sensitive argument's value shorter than {MIN_SCRUBBED_LENGTH} characters, "
    "which cannot be redacted where it occurs]"
)


def redacted_args(job_class: type[Job] | None, args: dict[str, Any]) -> dict[str, Any]:
    """args with each Annotated[..., Sensitive] parameter's value replaced by "[redacted]".

    If job_class is None or inspecting it raises, every value is "[redacted]". A stored argument that
    matches no parameter, or whose annotation cannot be resolved, is redacted too: nothing says it is
    safe to log, and a failure log must never leak a secret.
    """
    if job_class is None:
        return dict.fromkeys(args, REDACTED)
    try:
        shown = shown_parameters(job_class)
        return {key: value if key in shown else REDACTED for key, value in args.items()}
    except Exception:
        return dict.fromkeys(args, REDACTED)


def display_args(job_class: str, args: dict[str, Any]) -> dict[str, Any]:
    """``args`` of a job stored as ``job_class``, as they may be shown: each Sensitive one (or all,
    if this process does not know the class) redacted."""
    try:
        return redacted_args(resolve_job_class(job_class), args)
    except BaseException:  # an import the stored class triggers may raise anything, SystemExit included
        return redacted_args(None, args)


def display_json(job_class: str, args: dict[str, Any]) -> str:
    """``display_args`` as the JSON text a log line carries."""
    return dumps(display_args(job_class, args))


def for_observers(job: QueuedJob) -> QueuedJob:
    """``job`` as signal receivers see it: arguments redacted, as logs show them, and no receipt (a
    handle may hold the raw stored message, the Redis member or the AMQP body, arguments and all)."""
    return replace(job, args=display_args(job.job_class, job.args), handle=None)


def sensitive_values(job_class: str, args: dict[str, Any]) -> list[str]:
    """The text forms of the values the redaction hides, longest first (for ``scrub``): every non-empty
    string, and each number whose text has MIN_SCRUBBED_LENGTH characters or more (a payload's
    ``"version": 1`` would otherwise withhold every text with a "1" in it)."""
    shown = display_args(job_class, args)
    typed = _typed_parameters(job_class)
    found: set[str] = set()
    for key, value in args.items():
        if shown.get(key) == REDACTED and value != REDACTED:
            _collect(_secret_part(value) if key in typed else value, found)
    return sorted((s for s in found if s), key=len, reverse=True)


def _typed_parameters(job_class: str) -> frozenset[str]:
    """The parameters of ``job_class`` stored as a typed value or model reference; none if unknown."""
    try:
        return typed_parameters(resolve_job_class(job_class))
    except BaseException:
        return frozenset()


def _secret_part(value: Any) -> Any:
    """What of a typed value (its data) or a model reference (its key) is the secret: not its alias,
    model label or database alias, which name code and would only mangle scrubbed text."""
    if type(value) is dict:
        if value.keys() == {"type", "version", "data"}:
            return value["data"]
        if value.keys() == {"model", "pk", "db"}:
            return value["pk"]
    return value


def _collect(value: Any, found: set[str]) -> None:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            found.add(item)
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            text = str(item)
            if len(text) >= MIN_SCRUBBED_LENGTH:  # "1" or "42": too common to withhold a text for, too few to hide
                found.add(text)


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each secret replaced by ``[redacted]``; WITHHELD instead when a
    secret shorter than MIN_SCRUBBED_LENGTH occurs in what remains as a word of its own.

    A word of its own: not inside a longer run of letters and digits, so "k3y" is found in
    ``token=k3y`` or ``'k3y'`` but "1" is not in ``line 12``. ``secrets`` longest first
    (``sensitive_values``), so a longer value is replaced before a shorter one inside it could be.
    """
    short: list[str] = []
    for secret in secrets:
        if len(secret) < MIN_SCRUBBED_LENGTH:
            short.append(secret)
        elif secret in text:
            text = text.replace(secret, REDACTED)
    if short:
        rest = text.replace(REDACTED, " ")
        if any(_as_word(secret).search(rest) for secret in short if secret in rest):
            return WITHHELD
    return text


def _as_word(secret: str) -> re.Pattern[str]:
    """``secret`` where it is not preceded or followed by a letter or digit."""
    return re.compile(rf"(?<![^\W_]){re.escape(secret)}(?![^\W_])")


def scrub_for(job_class: str, args: dict[str, Any], text: str) -> str:
    """``text`` (an exception's message about a job stored as ``job_class`` with ``args``) with every
    Sensitive value of those arguments replaced by ``[redacted]``, or WITHHELD (``scrub``)."""
    return scrub(text, sensitive_values(job_class, args))


def _record_args(record: FailedJob) -> dict[str, Any]:
    # As kinetis_queue.failed.record_args decodes them: strictly (a tampered record raises).
    return decode_args(loads(record.args))


def shown_args(record: FailedJob) -> str:
    """The record's arguments as JSON with Sensitive values redacted; a record that does not decode
    shows nothing of its arguments."""
    try:
        args = _record_args(record)
    except Exception:
        return "(the stored arguments do not decode)"
    return display_json(record.job_class, args)


def shown_exception(record: FailedJob) -> tuple[str, str]:
    """The record's exception message and traceback, scrubbed again (records written before scrubbing)."""
    try:
        secrets = sensitive_values(record.job_class, _record_args(record))
    except Exception:
        secrets = []
    return scrub(record.exception_message, secrets), scrub(record.traceback, secrets)
