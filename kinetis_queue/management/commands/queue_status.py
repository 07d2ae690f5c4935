"""``manage.py queue_status``: ready, delayed, reserved and failed counts per connection and queue."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import DatabaseError

from kinetis_queue import conf
from kinetis_queue.exceptions import KinetisQueueError, QueueTablesMissingError
from kinetis_queue.management.commands._arguments import connection_name, positive_int, queue_list
from kinetis_queue.management.commands._output import QueueCommand
from kinetis_queue.management.commands._tables import table
from kinetis_queue.observability import history, status
from kinetis_queue.workflows import engine as workflow_engine


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def _expired_last_hour(connection: str | None) -> int:
    """Jobs that expired unstarted in the last 60 minutes (kinetis_queue.expiry), as the history counted them;
    0 without the history (HISTORY off) or its table."""
    try:
        return sum(counts.expired for counts in history.totals(connection, minutes=60).values())
    except DatabaseError:
        return 0


def _history_json(connection: str | None, minutes: int) -> dict[str, Any]:
    """The history's figures for --json: per minute (Unix minute start), per queue, slowest job classes."""
    return {
        "minutes": minutes,
        "per_minute": [
            {"minute": minute * 60, **counts.as_dict()}
            for minute, counts in history.series(connection, minutes=minutes)
        ],
        "per_queue": [
            {"connection": c, "queue": q, **counts.as_dict()}
            for (c, q), counts in history.totals(connection, minutes=minutes).items()
        ],
        "slowest": [
            {"connection": c, "job": job, "deliveries": counts.deliveries, **counts.as_dict()}
            for c, job, counts in history.slowest(connection, minutes=minutes)
        ],
    }


def _cell(value: int | None, approximate: bool) -> str:
    if value is None:
        return "-"
    return f"~{value}" if approximate else str(value)


class Command(QueueCommand):
    help = (
        "A point-in-time snapshot per queue: ready (an expired reservation counts: the next pop takes it), "
        "delayed, reserved (live reservations), waiting (size()), failed records, and whether the queue is "
        "paused (queue_pause; a paused queue is listed even with no job). '-' means the backend cannot tell, "
        "'~' an estimate. Payloads are never read."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--connection", type=connection_name, help="one connection (default: all)")
        parser.add_argument(
            "--queue",
            type=queue_list,
            default=None,
            help="queues to show: a,b (default: every queue the backend can list)",
        )
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
        parser.add_argument(
            "--history",
            action="store_true",
            help="also the counts of the last --minutes minutes: per minute, per queue, and the slowest job classes",
        )
        parser.add_argument(
            "--minutes", type=positive_int, default=60, help="the history's window (default 60, at most 1440)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            if options["connection"]:
                conf.connection_settings(options["connection"])
            else:
                conf.load()
        except KinetisQueueError as exc:
            raise CommandError(str(exc)) from exc
        try:
            figures = status.collect(options["connection"], options["queue"])
        except QueueTablesMissingError as exc:
            raise CommandError(str(exc)) from exc
        workflows = workflow_engine.counts()
        minutes = min(options["minutes"], history.KEEP_HOURS * 60)
        expired = _expired_last_hour(options["connection"])
        if options["json"]:
            payload: dict[str, Any] = {
                "connections": [f.as_dict() for f in figures],
                "workflows": workflows,
                "expired_last_hour": expired,
            }
            if options["history"]:
                payload["history"] = _history_json(options["connection"], minutes)
            self.stdout.write(json.dumps(payload, indent=2))
        else:
            self._table(figures)
            if any(workflows.values()):
                self.stdout.write(
                    "Chains and batches: "
                    + ", ".join(f"{n} {state}" for state, n in workflows.items() if n)
                    + " (queue_prune removes the ended ones)"
                )
            if expired:
                self.stdout.write(
                    f"Expired unstarted in the last hour: {expired} job(s) (queue_status --history --json: per queue)"
                )
            if options["history"]:
                self._history(options["connection"], minutes)
        broken = [f.connection for f in figures if f.error is not None]
        if broken:
            raise CommandError(f"figures unavailable for connection(s) {', '.join(broken)}")

    def _table(self, figures: list[status.ConnectionFigures]) -> None:
        rows = [("CONNECTION", "BACKEND", "QUEUE", "READY", "DELAYED", "RESERVED", "WAITING", "FAILED", "PAUSED")]
        for connection in figures:
            if connection.error is not None:
                rows.append((connection.connection, connection.backend, "(unavailable)", "", "", "", "", "", ""))
                continue
            for q in connection.queues:
                s, approx = q.stats, q.stats.approximate
                rows.append(
                    (
                        connection.connection,
                        connection.backend,
                        q.queue,
                        _cell(s.ready, approx),
                        _cell(s.delayed, approx),
                        _cell(s.reserved, approx),
                        _cell(s.waiting, approx),
                        str(q.failed),
                        "yes" if q.paused else "no",
                    )
                )
        for text in table(rows, numeric=range(3, len(rows[0]) - 1)):  # PAUSED, the last column, is a word
            self.stdout.write(text)
        for connection in figures:
            outbox = connection.outbox
            if outbox is not None:
                age = "" if outbox.oldest_age is None else f", the oldest pushed {outbox.oldest_age:.1f}s ago"
                line = f"Outbox of {connection.connection} (database {outbox.database}): {outbox.waiting} waiting{age}"
                if outbox.refused:
                    line += (
                        f"; {outbox.refused} refused for good by the store, now failed jobs "
                        f"(queue_failed --connection {connection.connection})"
                    )
                if outbox.over_threshold:
                    self.stdout.write(
                        f"{line}: above OUTBOX_WARN ({outbox.warn}); is a relay running?", self.style.WARNING
                    )
                else:
                    self.stdout.write(line)
        for connection in figures:
            if connection.all_paused:
                self.stdout.write(
                    f"Every queue of {connection.connection} is paused, new ones included "
                    f"(queue_resume --all --connection {connection.connection})",
                    self.style.WARNING,
                )
        for connection in figures:
            if connection.error is not None:
                self.stderr.write(f"{connection.connection}: {connection.error}")

    def _history(self, connection: str | None, minutes: int) -> None:
        """The history tables: the active minutes, each queue's totals and the slowest job classes."""
        header = ("PUSHED", "SUCCEEDED", "RELEASED", "FAILED", "OTHER")

        def figures(counts: history.Counts) -> tuple[str, ...]:
            return tuple(str(n) for n in counts.columns())

        self.stdout.write(f"\nHistory of the last {minutes} minutes (UTC; each process writes its counts each second):")
        active = [(m, c) for m, c in history.series(connection, minutes=minutes) if c.pushed or c.deliveries]
        if not active:
            self.stdout.write("Nothing was pushed or run (is KINETIS_QUEUE['HISTORY'] off?).")
            return
        per_minute: list[tuple[str, ...]] = [("MINUTE", *header)]
        for minute, counts in active:
            per_minute.append((datetime.fromtimestamp(minute * 60, UTC).strftime("%Y-%m-%d %H:%M"), *figures(counts)))
        for text in table(per_minute, numeric=range(1, 6)):
            self.stdout.write(text)
        per_queue: list[tuple[str, ...]] = [("CONNECTION", "QUEUE", *header, "P50", "P95")]
        for (name, queue), counts in history.totals(connection, minutes=minutes).items():
            p50, p95 = counts.quantile(0.5), counts.quantile(0.95)
            per_queue.append((name, queue, *figures(counts), _seconds(p50), _seconds(p95)))
        self.stdout.write("")
        for text in table(per_queue, numeric=range(2, 9)):
            self.stdout.write(text)
        slow = [("CONNECTION", "SLOWEST JOB CLASSES", "RUNS", "FAILED", "MEAN", "P50", "P95")]
        for name, job, counts in history.slowest(connection, minutes=minutes):
            shown = counts.as_dict()
            slow.append(
                (
                    name,
                    job,
                    str(counts.deliveries),
                    str(counts.failed),
                    _seconds(shown["mean"]),
                    _seconds(shown["p50"]),
                    _seconds(shown["p95"]),
                )
            )
        self.stdout.write("")
        for text in table(slow, numeric=range(2, 7)):
            self.stdout.write(text)
