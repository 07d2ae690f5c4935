"""Which subprocesses of a test run are measured for coverage.

``make test`` runs pytest with coverage, whose ``patch = ["subprocess"]`` (pyproject.toml) measures every Python
subprocess started under it through the ``COVERAGE_PROCESS_CONFIG`` variable it sets. A helper process that runs
none of kinetis_queue (moto's server) still pays coverage's tracer on each call: moto spent 10.2 ms of CPU per
request under it against 5.9 ms without, on this machine. Such a process is started with :func:`uncovered`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

#: The variable coverage sets for the subprocesses it measures.
VARIABLE = "COVERAGE_PROCESS_CONFIG"


def uncovered(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's environment) without what makes coverage measure a subprocess."""
    result = dict(os.environ if env is None else env)
    result.pop(VARIABLE, None)
    return result
