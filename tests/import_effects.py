"""A module with an import-time effect, inside the installed app "tests", that no test imports.

tests/conformance/test_resolution.py stores payloads naming its job class, queued receiver and
function: a worker must never import it for them (kinetis_queue/payload/registry.py). Only a worker whose
settings list it in KINETIS_QUEUE["IMPORTS"] (tests/imports_settings.py) imports it, at start-up.
Importing it writes "imported" to the file KINETIS_TESTS_IMPORT_MARKER names, if set.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.dispatch import Signal

from kinetis_queue import Job
from kinetis_queue.contrib.receivers import queued_receiver

_MARKER = os.environ.get("KINETIS_TESTS_IMPORT_MARKER")
if _MARKER:
    Path(_MARKER).write_text("imported")

effect_signal = Signal()


class Effect(Job):
    """Appends "ran" to the marker file when it runs."""

    def handle(self) -> None:
        if _MARKER:
            with Path(_MARKER).open("a") as marker:
                marker.write(" ran")


@queued_receiver(effect_signal)
def effect_receiver(sender: Any, **kwargs: Any) -> None:
    """A queued receiver nothing else registers."""


def effect_task() -> None:
    """Named as a django.tasks task path by a test payload (it is not one)."""
