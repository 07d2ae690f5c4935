"""The per-minute history (kinetis_queue/observability/history.py, its counts in tally.py): what pushes and
deliveries count, that a flush rewrites its rows (repeating one counts nothing twice), that processes' rows
sum, that memory and the table stay bounded, and what ``queue_status --history`` prints from it."""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.db import DatabaseError
from django.db.models import Sum
from django.test import override_settings

from kinetis_queue import queues
from kinetis_queue.job import Job
from kinetis_queue.observability import history
from kinetis_queue.observability import tally as tally_module
from kinetis_queue.observability.history import WRITER, Writer
from kinetis_queue.observability.models import HistoryMinute
from kinetis_queue.observability.tally import TALLY, Tally
from kinetis_queue.outcomes import JobOutcome, JobReport
from kinetis_queue.worker import Worker
from tests import jobs
from tests.settings import KINETIS_QUEUE
from tests.support.helpers import exit_forked_child

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "s3cret-value-42"


class Report(Job):
    """A job class whose name differs from the next one's in case alone (the MariaDB upsert test)."""

    def handle(self) -> None:
        pass


class REPORT(Job):
    def handle(self) -> None:
        pass


CASED = (f"{__name__}.Report", f"{__name__}.REPORT")


@pytest.fixture
def recorded() -> Iterator[None]:
    """HISTORY on; the process's recorder stopped after (its thread, its last flush)."""
    with override_settings(KINETIS_QUEUE={**KINETIS_QUEUE, "HISTORY": True}):
        yield
        WRITER.stop()


def _writer() -> Writer:
    """A process of its own: a tally (keeping its minutes for the history) and its writer, no thread."""
    tally = Tally()
    tally.keep_minutes = True
    return Writer(tally)


def _report(queue: str, outcome: JobOutcome, duration: float, job: str = "tests.jobs.Records") -> JobReport:
    return JobReport(job, queue, "id", 1, outcome, duration)


def _counts(queue: str) -> history.Counts:
    return history.totals("sqlite")[("sqlite", queue)]


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_workers_deliveries_and_the_pushes_are_counted_per_minute_queue_and_class(
    recorded: None, queue_name: str
) -> None:
    queue = queues["sqlite"]
    queue.push(jobs.Records(SECRET), queue=queue_name)
    queue.push_many([jobs.Records("b"), jobs.Fails("c")], queue=queue_name, max_attempts=2)
    worker = Worker(queue, recorder=None, retry_base_delay=0)
    try:
        while worker.process_next(0.2, [queue_name]):
            pass
    finally:
        worker.close()  # the hooks' stop(): a last flush
    counts = _counts(queue_name)
    assert counts.columns() == (3, 2, 1, 1, 0)
    assert sum(counts.buckets) == 4 and counts.runtime > 0
    [(minute, now)] = [item for item in history.series("sqlite", minutes=2) if item[1].pushed]
    assert now.columns() == (3, 2, 1, 1, 0) and minute == int(time.time() // 60)
    by_class = {job: c for _, job, c in history.slowest("sqlite") if c.deliveries}
    assert by_class["tests.jobs.Fails"].failed == 1 and by_class["tests.jobs.Fails"].released == 1
    assert by_class["tests.jobs.Records"].succeeded == 2
    stored = json.dumps(list(HistoryMinute.objects.filter(queue=queue_name).values()))
    assert SECRET not in stored


def test_a_flush_rewrites_its_rows_so_repeating_one_counts_nothing_twice(recorded: None, queue_name: str) -> None:
    writer = _writer()
    writer.tally.delivered("sqlite", _report(queue_name, JobOutcome.SUCCEEDED, 0.003))
    rows = writer.tally.take()
    history._upsert("default", [writer._record(row) for row in rows])
    writer.tally.give_back(rows)  # as if the write had raised once the database had it
    writer.flush()
    assert _counts(queue_name).succeeded == 1
    writer.tally.delivered("sqlite", _report(queue_name, JobOutcome.SUCCEEDED, 0.003))
    writer.flush()
    assert _counts(queue_name).succeeded == 2
    assert HistoryMinute.objects.filter(queue=queue_name).count() == 1


def test_the_rows_of_two_processes_are_summed(recorded: None, queue_name: str) -> None:
    first, second = _writer(), _writer()
    first.tally.pushed("sqlite", queue_name, "tests.jobs.Records")
    second.tally.pushed("sqlite", queue_name, "tests.jobs.Records")
    second.tally.delivered("sqlite", _report(queue_name, JobOutcome.FAILED, 2.0))
    first.flush()
    second.flush()
    assert _counts(queue_name).columns() == (2, 0, 0, 1, 0)
    assert HistoryMinute.objects.filter(queue=queue_name).values("source").distinct().count() == 2


def test_a_minute_leaves_memory_once_written_after_it_ended(
    recorded: None, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [time.time()]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    writer = _writer()
    writer.tally.delivered("sqlite", _report(queue_name, JobOutcome.SUCCEEDED, 0.02))
    writer.flush()
    clock[0] += 60
    writer.tally.delivered("sqlite", _report(queue_name, JobOutcome.SUCCEEDED, 0.02))
    writer.flush()
    assert not writer.tally._ended and list(writer.tally._current) == [("sqlite", queue_name, "tests.jobs.Records")]
    assert _counts(queue_name).succeeded == 2
    assert HistoryMinute.objects.filter(queue=queue_name).count() == 2


def test_counts_wait_for_a_failed_flush_and_memory_stays_bounded_while_the_database_refuses(
    recorded: None, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [time.time()]
    monkeypatch.setattr(time, "time", lambda: clock[0])
    writer = _writer()
    refusing = [True]
    real = type(HistoryMinute.objects.none()).bulk_create

    def bulk_create(self: Any, *args: Any, **kwargs: Any) -> Any:
        if refusing[0]:
            raise DatabaseError("refused")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(HistoryMinute.objects.none()), "bulk_create", bulk_create)
    writer.tally.delivered("sqlite", _report(queue_name, JobOutcome.FAILED, 0.02))
    with pytest.raises(DatabaseError):
        writer.flush()
    clock[0] += 60
    writer.tally.delivered("sqlite", _report(queue_name, JobOutcome.SUCCEEDED, 0.02))
    refusing[0] = False
    writer.flush()
    assert _counts(queue_name).columns() == (0, 1, 0, 1, 0)

    refusing[0] = True
    for _ in range(tally_module.MAX_MINUTES + 5):
        clock[0] += 60
        writer.tally.delivered("sqlite", _report(queue_name, JobOutcome.SUCCEEDED, 0.02))
        with pytest.raises(DatabaseError):
            writer.flush()
    assert len(writer.tally._ended) == tally_module.MAX_MINUTES
    refusing[0] = False
    writer.flush()
    # The minute written before, the MAX_MINUTES newest ended ones (the 4 older were dropped), the current one.
    written = HistoryMinute.objects.filter(queue=queue_name).aggregate(Sum("succeeded"))["succeeded__sum"]
    assert written == 1 + tally_module.MAX_MINUTES + 1


def test_rows_older_than_the_kept_hours_are_deleted_as_flushes_go(recorded: None, queue_name: str) -> None:
    old = int(time.time() // 60) - history.KEEP_HOURS * 60 - 1
    HistoryMinute.objects.create(minute=old, source="x" * 32, connection="sqlite", queue=queue_name, job="j")
    HistoryMinute.objects.create(minute=old + 2, source="x" * 32, connection="sqlite", queue=queue_name, job="j")
    writer = _writer()
    writer.tally.pushed("sqlite", queue_name, "tests.jobs.Records")
    writer.flush()
    assert sorted(HistoryMinute.objects.filter(queue=queue_name).values_list("minute", flat=True)) == [
        old + 2,
        int(time.time() // 60),
    ]


def _row(minute: int, source: str, queue: str) -> None:
    HistoryMinute.objects.create(minute=minute, source=source, connection="sqlite", queue=queue, job="j")


def test_the_oldest_minutes_beyond_the_row_limit_are_deleted_whole(recorded: None, queue_name: str) -> None:
    now = time.time()
    minute = int(now // 60)
    HistoryMinute.objects.all().delete()  # the limit is on the whole table
    for n, back in enumerate((3, 2, 2, 1, 0)):  # five rows over four recent minutes, the oldest first
        _row(minute - back, f"{n:032}", queue_name)
    history.prune("default", now, max_rows=3)
    assert sorted(HistoryMinute.objects.values_list("minute", flat=True)) == [minute - 1, minute]
    # two rows more than the limit: minute - 3 (one row) and minute - 2 (two rows) went, both whole
    history.prune("default", now, max_rows=2)
    assert HistoryMinute.objects.count() == 2  # within the limit: nothing deleted


def test_the_writer_prunes_the_history_by_size_as_it_flushes(
    recorded: None, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    minute = int(time.time() // 60)
    HistoryMinute.objects.all().delete()  # the limit is on the whole table
    for back in (5, 4):
        _row(minute - back, "x" * 32, queue_name)
    monkeypatch.setattr(history, "MAX_ROWS", 2)
    writer = _writer()
    writer.tally.pushed("sqlite", queue_name, "tests.jobs.Records")
    writer.flush()  # one row more than MAX_ROWS: the oldest minute goes
    assert sorted(HistoryMinute.objects.values_list("minute", flat=True)) == [minute - 4, minute]


def test_names_this_process_does_not_know_fold_into_one_label(queue_name: str) -> None:
    tally = Tally()
    for n in range(300):
        tally.pushed("sqlite", queue_name, f"forged.module.Name{n}")
        tally.delivered("sqlite", _report(queue_name, JobOutcome.FAILED, 0.01, f"forged.task{n}"))
    tally.delivered("sqlite", _report(queue_name, JobOutcome.SUCCEEDED, 0.01, "tests.jobs.Records"))
    totals = tally.totals()
    assert sorted(totals) == [("sqlite", queue_name, "(unknown)"), ("sqlite", queue_name, "tests.jobs.Records")]
    unknown = totals[("sqlite", queue_name, "(unknown)")]
    assert (unknown[tally_module.PUSHED], unknown[tally_module.OUTCOME_INDEX[JobOutcome.FAILED]]) == (300, 300)


def test_quantiles_come_from_the_buckets() -> None:
    counts = history.Counts()
    assert counts.quantile(0.5) is None
    counts.buckets[0] = 50  # <= 5 ms
    counts.buckets[4] = 50  # 50 to 100 ms
    assert counts.quantile(0.5) == pytest.approx(0.005)
    assert counts.quantile(0.95) == pytest.approx(0.05 + 0.05 * 0.9)
    counts.buckets[-1] = 900  # beyond the last bound: that bound
    assert counts.quantile(0.95) == history.BUCKETS[-1]


def test_a_forked_child_starts_empty_under_a_source_of_its_own(recorded: None, queue_name: str) -> None:
    TALLY.pushed("sqlite", queue_name, "tests.jobs.Records")
    parent = TALLY.source
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        os.write(write, json.dumps([len(TALLY._current), TALLY.source != parent]).encode())
        exit_forked_child(0)
    os.close(write)
    child = json.loads(os.read(read, 100))
    os.waitpid(pid, 0)
    assert child == [0, True]


def test_history_off_counts_nothing(queue_name: str) -> None:
    queue = queues["sqlite"]
    queue.push(jobs.Records("a"), queue=queue_name)
    worker = Worker(queue, recorder=None)
    try:
        assert worker.process_next(1, [queue_name]) is True
    finally:
        worker.close()
    WRITER.flush()
    assert not [key for key in TALLY.totals() if key[1] == queue_name]
    assert not HistoryMinute.objects.filter(queue=queue_name).exists()


def test_queue_status_history_prints_the_minutes_the_queues_and_the_slowest_classes(
    recorded: None, queue_name: str
) -> None:
    writer = _writer()
    for _ in range(3):
        writer.tally.pushed("sqlite", queue_name, "tests.jobs.Records")
    writer.tally.delivered("sqlite", _report(queue_name, JobOutcome.SUCCEEDED, 0.002))
    writer.tally.delivered("sqlite", _report(queue_name, JobOutcome.FAILED, 7.0, "tests.jobs.Fails"))
    writer.flush()
    out = io.StringIO()
    call_command("queue_status", "--connection=sqlite", "--history", "--minutes=5", stdout=out)
    text = out.getvalue()
    assert "History of the last 5 minutes" in text
    [queue_line] = [line for line in text.splitlines() if line.startswith("sqlite") and queue_name in line]
    assert queue_line.split()[2:7] == ["3", "1", "0", "1", "0"]
    slow = text[text.index("SLOWEST JOB CLASSES") :].splitlines()
    assert slow[1].split()[1] == "tests.jobs.Fails"  # the highest p95 first
    out = io.StringIO()
    call_command("queue_status", "--connection=sqlite", "--history", "--json", stdout=out)
    payload = json.loads(out.getvalue())["history"]
    [mine] = [row for row in payload["per_queue"] if row["queue"] == queue_name]
    assert (mine["pushed"], mine["succeeded"], mine["failed"]) == (3, 1, 1)
    assert len(payload["per_minute"]) == 60


class _HistoryTo:
    """A database router sending the history table to one alias."""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def db_for_read(self, model: type, **hints: Any) -> str | None:
        return self.alias if model is HistoryMinute else None

    db_for_write = db_for_read


@pytest.mark.django_db(transaction=True, databases=["default", "postgres", "mariadb"])
@pytest.mark.parametrize("alias", ["postgres", "mariadb"])
def test_the_upsert_on_each_database_and_class_names_differing_in_case_are_two_rows(
    recorded: None, queue_name: str, alias: str
) -> None:
    with override_settings(DATABASE_ROUTERS=[_HistoryTo(alias)]):
        writer = _writer()
        writer.tally.delivered("sqlite", _report(queue_name, JobOutcome.SUCCEEDED, 0.01, CASED[0]))
        writer.tally.delivered("sqlite", _report(queue_name, JobOutcome.SUCCEEDED, 0.01, CASED[1]))
        writer.flush()
        writer.tally.delivered("sqlite", _report(queue_name, JobOutcome.FAILED, 0.01, CASED[0]))
        writer.flush()
        rows = HistoryMinute.objects.using(alias).filter(queue=queue_name)
        assert sorted(rows.values_list("job", "succeeded", "failed")) == [(CASED[1], 1, 0), (CASED[0], 1, 1)]
