"""The PostgreSQL watchdog of OPERATION_TIMEOUT (backends/sql/timeouts.py) at its edges: it never dies on a
socket it cannot shut, and a call it cut that still returned leaves its connection marked for replacement."""

from __future__ import annotations

import os
import socket

from django.db import connections

from kinetis_queue.backends.sql import timeouts
from tests.support.helpers import wait_until


def test_shutting_a_descriptor_that_is_no_longer_a_socket_does_not_raise() -> None:
    """The watchdog thread shuts the socket of each late call; a descriptor gone meanwhile must not end it."""
    read_end, write_end = os.pipe()
    os.close(write_end)
    os.close(read_end)  # a closed descriptor: socket.fromfd() raises OSError
    timeouts._shut(read_end)


def test_shutting_a_socket_that_is_not_connected_does_not_raise() -> None:
    """A peer that already went away leaves a socket whose shutdown() raises ENOTCONN."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as unconnected:
        timeouts._shut(unconnected.fileno())
        assert unconnected.fileno() != -1  # only the duplicate was closed: the caller's descriptor stays


def test_a_call_the_watchdog_cut_that_still_returned_marks_its_connection_for_replacement() -> None:
    db = connections["postgres"]
    db.ensure_connection()
    db.errors_occurred = False
    with timeouts.bounded(db, 0.05):
        # No query runs, so nothing fails: the call simply outlives its limit until the watchdog cuts it.
        wait_until(lambda: not timeouts._watchdog._calls, timeout=10)
    assert db.errors_occurred  # Django's next check replaces the connection
    db.close()
