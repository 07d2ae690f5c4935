"""Helpers every bench module shares: progress lines on stderr and the positive-int CLI argument."""

from __future__ import annotations

import argparse
import sys


def log(message: str) -> None:
    """A progress line on stderr, so the result table on stdout stays clean."""
    print(message, file=sys.stderr, flush=True)


def positive_int(value: str) -> int:
    """argparse type: an int of 1 or more."""
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError("must be a positive integer")
    return int(value)
