"""The worker registry (queue_workers), queue_health and the health view (kinetis_queue/observability)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections as db_connections
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext

from kinetis_queue import queues
from kinetis_queue.models import WorkerRecord
from kinetis_queue.observability.registry import EXPIRE_AFTER, GONE_AFTER, STALLED_AFTER, WorkerRegistry, workers
from tests import jobs
from tests.faults import procs
from tests.settings import KINETIS_QUEUE
from tests.support.helpers import wait_until


@pytest.fixture(autouse=True)
def _empty_registry() -> None:
    WorkerRecord.objects.all().delete()


def _registry(*options: str) -> list[dict[str, Any]]:
    """queue_workers --json; without --connection it reads every connection's store figures (seconds)."""
    out = io.StringIO()
    call_command("queue_workers", "--json", *options, stdout=out)
    return json.loads(out.getvalue())["workers"]  # type: ignore[no-any-return]


def _worker(tmp_path: Path, queue_name: str) -> subprocess.Popen[bytes]:
    """queue_work (through tests.faults.worker, for its knob) writing its registry row every 0.5 s, not every
    5 s: the test awaits two rows (a job running, then none), and the interval is not what it asserts."""
    command = [
        sys.executable,
        "-m",
        "tests.faults.worker",
        "--connection=sqlite",
        f"--queue={queue_name}",
        "--concurrency=2",
    ]
    log = open(tmp_path / f"worker-{uuid.uuid4().hex[:6]}.log", "wb")
    try:
        env = procs.env(tmp_path, registry_interval=0.5)
        return subprocess.Popen(command, env=env, cwd=procs.ROOT, stdout=log, stderr=log)
    finally:
        log.close()


@pytest.mark.timeout(120)
def test_a_worker_registers_what_it_runs_and_leaves_the_registry_when_it_stops(tmp_path: Path, queue_name: str) -> None:
    marker, release, done = (str(tmp_path / name) for name in ("running", "release", "done"))
    worker = _worker(tmp_path, queue_name)
    try:
        queues["sqlite"].push(jobs.SignalsWhileRunning(marker, release, done), queue=queue_name)
        wait_until(lambda: Path(marker).exists(), 60)
        # Awaited on the worker's connection alone (quick to read), then read once as the test always did.
        wait_until(lambda: [w for w in _registry("--connection=sqlite") if w["running"]], 30)
        [entry] = [w for w in _registry() if w["running"]]
        assert (entry["connection"], entry["queues"], entry["concurrency"], entry["state"]) == (
            "sqlite",
            [queue_name],
            2,
            "alive",
        )
        assert entry["pid"] == worker.pid
        assert [job["job"] for job in entry["running"]] == ["tests.jobs.SignalsWhileRunning"]
        assert "marker" not in json.dumps(entry)  # names, never arguments
        Path(release).touch()
        wait_until(
            lambda: [w for w in _registry("--connection=sqlite") if w["processed"] == 1 and not w["running"]], 30
        )
        out = io.StringIO()
        call_command("queue_health", "--connection=sqlite", stdout=out)
        assert out.getvalue() == "sqlite: ok (1 worker(s))\n"
    finally:
        assert procs.stop(worker) == 0
    assert _registry() == []  # a clean stop leaves at once


def test_queue_health_fails_without_a_worker_or_a_store_and_says_why() -> None:
    out = io.StringIO()
    with pytest.raises(CommandError, match="unhealthy: sqlite"):
        call_command("queue_health", "--connection=sqlite", stdout=out)
    assert "no worker of this connection was seen in the last 15 seconds" in out.getvalue()
    call_command("queue_health", "--connection=sqlite", "--no-workers", stdout=io.StringIO())  # the store answers

    down = {"BACKEND": "redis", "URL": "redis://127.0.0.1:9/0", "SOCKET_TIMEOUT": 1}
    with override_settings(
        KINETIS_QUEUE={**KINETIS_QUEUE, "CONNECTIONS": {**KINETIS_QUEUE["CONNECTIONS"], "down": down}}
    ):
        out = io.StringIO()
        with pytest.raises(CommandError):
            call_command("queue_health", "--connection=down", "--no-workers", "--json", stdout=out)
    [report] = json.loads(out.getvalue())["connections"]
    assert report["answers"] is False and report["problems"][0].startswith("the store does not answer")


@pytest.mark.logs_errors("django.request")
def test_the_health_view_answers_503_with_the_reasons_and_200_when_healthy() -> None:
    client = Client()
    failing = client.get("/queue/health/?connection=sqlite")
    assert failing.status_code == 503 and failing.json()["status"] == "failing"
    assert client.get("/queue/health/?connection=sqlite&workers=0").status_code == 200
    assert client.get("/queue/health/?connection=nosuch").status_code == 503
    assert client.post("/queue/health/").status_code == 405


def _row(**fields: Any) -> WorkerRecord:
    now = time.time()
    values = {
        "id": uuid.uuid4().hex,
        "host": "h",
        "pid": 1,
        "connection": "sqlite",
        "queues": "default",
        "concurrency": 1,
        "started_at": now - 600,
        "last_seen": now,
        **fields,
    }
    return WorkerRecord.objects.create(**values)


def test_a_worker_unseen_is_gone_then_expires_and_one_idle_beside_ready_jobs_is_stalled(queue_name: str) -> None:
    now = time.time()
    gone = _row(last_seen=now - GONE_AFTER - 1)
    expired = _row(last_seen=now - EXPIRE_AFTER - 1)
    stalled = _row(queues=queue_name, last_started=now - STALLED_AFTER - 1)
    idle = _row(queues=f"{queue_name}-empty", last_started=now - STALLED_AFTER - 1)

    with CaptureQueriesContext(db_connections["default"]) as queries:
        states = {w.id: w.state for w in workers(ready={f"sqlite/{queue_name}": 3})}

    assert states == {gone.pk: "gone", stalled.pk: "stalled", idle.pk: "alive"}
    # Reading writes nothing (a health probe or a scrape ran a DELETE on every GET); the next worker to
    # register deletes the expired row.
    assert [q["sql"] for q in queries if not q["sql"].lstrip().upper().startswith("SELECT")] == []
    assert WorkerRecord.objects.filter(pk=expired.pk).exists()
    registry = WorkerRegistry("sqlite", [queue_name], 1)
    registry._write()
    try:
        assert not WorkerRecord.objects.filter(pk=expired.pk).exists()
        assert WorkerRecord.objects.filter(pk=gone.pk).exists()
    finally:
        registry._remove()
