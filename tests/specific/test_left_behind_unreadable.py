"""--stop-when-empty's last line when the queue figures cannot be read: the reply to Redis's stats script is lost
(a real cut connection, through the fault proxy), and the worker says the count is unknown instead of failing."""

from __future__ import annotations

import io
from urllib.parse import urlsplit, urlunsplit

from django.conf import settings
from django.core.management import call_command
from django.test import override_settings

from kinetis_queue.backends.redis import scripts
from tests.faults.faultproxy import CutAfter, FaultProxy


def test_stop_when_empty_says_left_behind_is_unknown_when_the_stats_reply_is_lost(queue_name: str) -> None:
    base = settings.KINETIS_QUEUE["CONNECTIONS"]["redis"]
    parts = urlsplit(base["URL"])
    with FaultProxy(parts.hostname or "127.0.0.1", parts.port or 6379) as proxy:
        url = urlunsplit(parts._replace(netloc=f"127.0.0.1:{proxy.port}"))
        proxy.set(CutAfter(scripts.STATS.sha.encode()))
        entry = {**base, "URL": url}
        setting = {**settings.KINETIS_QUEUE, "CONNECTIONS": {**settings.KINETIS_QUEUE["CONNECTIONS"], "cut": entry}}
        out = io.StringIO()
        with override_settings(KINETIS_QUEUE=setting):
            call_command("queue_work", "--connection=cut", f"--queue={queue_name}", "--stop-when-empty", stdout=out)
        assert proxy.matched == 1
    lines = out.getvalue().splitlines()
    assert lines[-2] == "Worker stopped (empty) after 0 job(s)."
    assert lines[-1].startswith("Left behind: unknown (the queue figures could not be read: ")
