"""Glue the scenarios share: recorded pushes, FailedJob records per tag, and the closing report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kinetis_queue.contracts import Queue
from kinetis_queue.exceptions import (
    ConnectionFailedError,
    InvalidQueueArgumentError,
    UnserializableJobError,
)
from kinetis_queue.job import Job
from tests.faults import checker, history

#: push() errors that prove nothing was stored (RELIABILITY.md §2.1, push.fail).
NOT_STORED = (InvalidQueueArgumentError, UnserializableJobError, ConnectionFailedError)


def push(queue: Queue, job: Job, queue_name: str, **options: Any) -> str | None:
    """push() with its history: push.invoke, then push.ok, push.fail (nothing stored) or push.info (unknown)."""
    tag = getattr(job, "tag", None)
    history.record("push.invoke", tag, queue=queue_name)
    try:
        job_id = queue.push(job, queue=queue_name, **options)
    except NOT_STORED as exc:
        history.record("push.fail", tag, error=type(exc).__name__)
        return None
    except Exception as exc:
        history.record("push.info", tag, error=type(exc).__name__)
        return None
    history.record("push.ok", tag, job_id=job_id)
    return job_id


def failed_records(queue_name: str) -> dict[str, int]:
    """FailedJob records on ``queue_name``, counted per tag (or per job id when the args carry no tag)."""
    from kinetis_queue.models import FailedJob

    counts: dict[str, int] = {}
    for args, job_id in FailedJob.objects.filter(queue=queue_name).values_list("args", "job_id"):
        try:
            key = json.loads(args).get("tag") or job_id
        except (ValueError, AttributeError):
            key = job_id
        counts[key] = counts.get(key, 0) + 1
    return counts


def finish(
    scenario: str,
    backend: str,
    seed: int,
    history_dir: Path,
    queue_name: str,
    *,
    store: Any = None,
    drain_s: float | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Check the history, write the report under reports/reliability/, and return it."""
    report = checker.check(
        history.read(history_dir),
        scenario=scenario,
        backend=backend,
        seed=seed,
        failed_records=failed_records(queue_name),
        store_remaining=store.remaining(queue_name) if store is not None else None,
        drain_s=drain_s,
        extra=extra,
    )
    checker.write(report)
    return report
