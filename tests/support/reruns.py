"""What a rerun hid (issue 28): the failure of every attempt pytest-rerunfailures ran again, printed whole.

``make test`` reruns nothing; ``RERUNS='--reruns 1'`` turns reruns on for an investigation. The plugin itself
reports a rerun by name only, which leaves the race behind it unreadable. Here each rerun's report (on the
xdist controller, which receives every worker's reports) is kept and its failure printed in a section of the
terminal summary, so a green run that needed a second chance still says what failed the first time.
"""

from __future__ import annotations

import pytest

_RERUNS: list[pytest.TestReport] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.outcome == "rerun":  # type: ignore[comparison-overlap]  # pytest-rerunfailures' own outcome
        _RERUNS.append(report)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _RERUNS:
        return
    terminalreporter.section("what the reruns hid")
    for report in _RERUNS:
        terminalreporter.write_sep("_", f"{report.nodeid} ({report.when})")
        terminalreporter.write_line(report.longreprtext)
        for title, content in report.sections:
            if title.startswith("Captured log"):
                terminalreporter.write_sep("-", title)
                terminalreporter.write_line(content)
