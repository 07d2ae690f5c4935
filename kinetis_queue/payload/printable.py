"""One rule for text that reaches a terminal or a plain-text log: control characters escaped visibly.

A payload chooses some of what operators read (a task's, receiver's or callback's name, an exception's
text): printed raw, ``ESC[2J`` clears the screen and a newline forges a log line. ``printable()`` writes
each C0 and C1 control character, DEL, a lone surrogate and the bidirectional overrides as ``\\x1b`` or
``\\u202e``; the queue_* commands' output (management/commands/_output.py), the plain log formatter
(observability/logs.py) and the failed-job records (failed.py) all use it.
"""

from __future__ import annotations

import re
from typing import Final

#: Invisible characters that reorder or break what a terminal shows: bidirectional marks and overrides,
#: the Unicode line and paragraph separators; and lone surrogates.
_UNICODE: Final = r"\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
#: Every character escaped in a one-line text.
_IN_LINE: Final = re.compile(rf"[\x00-\x1f\x7f-\x9f{_UNICODE}]")
#: The same, but tab and newline kept: a multi-line text (a command's output, a traceback).
_IN_LINES: Final = re.compile(rf"[\x00-\x08\x0b-\x1f\x7f-\x9f{_UNICODE}]")


def escape(match: re.Match[str]) -> str:
    """The visible form of one matched character: ``\\x1b`` up to 0xff, else ``\\u202e``."""
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def printable(text: str, *, lines: bool = False) -> str:
    """``text`` with its control characters escaped (see the module docstring); ``lines`` keeps tab and
    newline. Text without any is returned as it is, at the cost of one regex search."""
    pattern = _IN_LINES if lines else _IN_LINE
    return pattern.sub(escape, text) if pattern.search(text) else text
