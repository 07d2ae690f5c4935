"""A django.tasks backend: Django's own ``@task`` API on any kinetis_queue connection.

``enqueue()`` stores a READY result row and pushes a ``RunTask`` job through the configured
connection; the ordinary ``queue_work`` worker runs it with the contract's guarantees (lease,
renewal, fencing, retries, failed jobs). Results live in the database (``TaskResultRecord``), so
``get_result()`` works whatever the store.

    TASKS = {"default": {"BACKEND": "kinetis_queue.tasks.KinetisTaskBackend",
                         "QUEUES": ["default"], "OPTIONS": {"CONNECTION": "default"}}}
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import traceback
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any, ParamSpec, TypeVar

from django.core import checks
from django.db import DatabaseError, router, transaction
from django.utils import timezone
from django.utils.crypto import get_random_string

from kinetis_queue import conf, connections, signals
from kinetis_queue.backends.sql import SqlQueue
from kinetis_queue.backends.sql.tables import explain
from kinetis_queue.contracts import PreparedPush, Queue, QueuedJob
from kinetis_queue.contrib.tasks.compat import (
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_enqueued,
    task_finished,
    task_started,
)
from kinetis_queue.contrib.tasks.options import KinetisTask, validate_options
from kinetis_queue.contrib.tasks.results import TaskResultRecord
from kinetis_queue.db.transactions import write_atomic
from kinetis_queue.dispatch import push_after_commit
from kinetis_queue.exceptions import JobReconstructionError, KinetisQueueError
from kinetis_queue.job import Job, JobContext, Sensitive, Snooze
from kinetis_queue.limits import DEFAULT_DELAY, ConcurrencyLimit
from kinetis_queue.payload import registry
from kinetis_queue.payload.envelope import RETRY_KEY, TIMEOUT_KEY
from kinetis_queue.ratelimits import RateLimit, as_rate_limit
from kinetis_queue.validation import MAX_QUEUE_NAME, QUEUE_NAME

_P = ParamSpec("_P")
_R = TypeVar("_R")
if TYPE_CHECKING:  # the stubs make Task generic; the runtime classes are not subscriptable
    AnyTask = Task[..., Any]
    AnyTaskResult = TaskResult[..., Any]

#: This process's worker id, recorded in worker_ids for every run it starts (at most 64 characters).
WORKER_ID = f"{socket.gethostname()[:40]}:{os.getpid()}"
#: Default of ``OPTIONS["RESULT_ROW_WAIT"]``: seconds a delivery snoozes, in all, waiting for its result
#: row to become visible before it fails with ResultRowMissingError.
RESULT_ROW_WAIT = 60
#: The longest single snooze while waiting for the result row (they double from 1 s up to this).
MAX_ROW_SNOOZE = 15


class ResultRowMissingError(KinetisQueueError):
    """A RunTask delivery found no result row, and waiting for it (``RESULT_ROW_WAIT``) did not help."""


class KinetisTaskBackend(BaseTaskBackend):
    """Runs ``@task`` functions through a KINETIS_QUEUE connection (``OPTIONS["CONNECTION"]``).

    Priority (``supports_priority``) is the connection's: SQL and Redis order a queue's jobs by
    ``Task.priority`` (higher first, docs/priority.md); SQS and RabbitMQ cannot, so a task with a
    priority other than 0 is refused there. ``run_after`` becomes the push delay, so it is bounded
    by the store's own delay ceiling (900 s on SQS). ``__init__`` does no I/O.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    #: ``@task(max_attempts=..., timeout=..., ...)``: the options of kinetis_queue.contrib.tasks.options.
    task_class = KinetisTask

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.connection: str | None = self.options.get("CONNECTION")

    @property
    def supports_priority(self) -> bool:  # type: ignore[override]  # per connection, not per class
        """Whether this backend's connection orders jobs by priority (Queue.supports_priority); False while
        KINETIS_QUEUE is invalid (Django asks at every ``@task``; the error is the check's, E001)."""
        try:
            return self._queue().supports_priority
        except KinetisQueueError:
            return False

    def _queue(self) -> Queue:
        """The connection this backend pushes through (built once per process, without I/O)."""
        return connections.queues.default() if self.connection is None else connections.queues[self.connection]

    def validate_task(self, task: AnyTask) -> None:
        super().validate_task(task)
        module = task.func.__module__
        if not registry.discoverable(module) or "<locals>" in task.func.__qualname__:
            raise InvalidTask(
                f"Task {task.module_path!r} is not defined at module level in a module a worker imports at "
                f"start-up (the {' and '.join(registry.DISCOVERED_SUBMODULES)} modules of INSTALLED_APPS, or one "
                "listed in KINETIS_QUEUE['IMPORTS']), so no worker could find it."
            )
        if QUEUE_NAME.fullmatch(task.queue_name) is None:
            raise InvalidTask(
                f"Queue name {task.queue_name!r} is invalid: use 1 to {MAX_QUEUE_NAME} letters, digits, '-' or '_'."
            )
        if isinstance(task, KinetisTask):
            validate_options(task)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        try:
            loaded = conf.load()
        except KinetisQueueError:
            return []  # an invalid KINETIS_QUEUE is reported once, as kinetis_queue.E001
        name = loaded.default_connection if self.connection is None else self.connection
        errors: list[checks.CheckMessage] = []
        if name not in loaded.connections:
            errors.append(
                checks.Error(
                    f"TASKS[{self.alias!r}]['OPTIONS']['CONNECTION'] names {name!r}, which is not in "
                    "KINETIS_QUEUE['CONNECTIONS']",
                    id="kinetis_queue.E101",
                )
            )
        wait = self.options.get("RESULT_ROW_WAIT", RESULT_ROW_WAIT)
        if type(wait) not in (int, float) or not 0 <= wait < float("inf"):
            errors.append(
                checks.Error(
                    f"TASKS[{self.alias!r}]['OPTIONS']['RESULT_ROW_WAIT'] must be a number of seconds, 0 or more",
                    id="kinetis_queue.E102",
                )
            )
        return errors

    def enqueue(self, task: Task[_P, _R], args: Any, kwargs: Any) -> TaskResult[_P, _R]:
        """Store the READY result row, then push the job; returns the result at once.

        Inside a transaction on the row's database the push waits for its commit (a worker must
        never pop a job whose row it cannot see), except on the SQL backend storing jobs in that
        same database, where the push is part of the transaction. A push that fails in the commit
        hook marks the result FAILED and is reported like any ``push_on_commit`` (log and signal).
        """
        self.validate_task(task)
        # What the worker receives is exactly what enqueue() returns: a strict JSON round trip.
        # Like Django's own backends, an unsupported type raises TypeError (NaN: ValueError).
        args, kwargs = json.loads(
            json.dumps([normalize_json(list(args)), normalize_json(dict(kwargs))], allow_nan=False)
        )
        queue = self._queue()
        now = timezone.now()
        result_id = get_random_string(32)
        delay = 0.0 if task.run_after is None else max(0.0, (task.run_after - now).total_seconds())
        job = RunTask(task.module_path, args, kwargs, result_id, self.alias)
        # Validate the push (queue name, delay ceiling, argument contract) before any write.
        prepared = queue.prepare(
            job, delay, task.queue_name, priority=task.priority, **_push_options(task, args, kwargs)
        )
        prepared = _with_attempt_rules(prepared, task)
        alias = router.db_for_write(TaskResultRecord)
        try:
            record = TaskResultRecord.objects.using(alias).create(
                id=result_id,
                task_path=task.module_path,
                backend=self.alias,
                queue_name=task.queue_name,
                priority=task.priority,
                run_after=task.run_after,
                status=TaskResultStatus.READY,
                enqueued_at=now,
                args=args,
                kwargs=kwargs,
                job_id=prepared.id,
            )
        except DatabaseError as exc:  # a forgotten migrate is said as such (QueueTablesMissingError)
            forgotten = explain(alias, exc, TaskResultRecord._meta.db_table)
            if forgotten is None:
                raise
            raise forgotten from exc

        def sent(job_id: str) -> None:  # a unique task whose key is held: this enqueue queued nothing
            if job_id != prepared.id:
                TaskResultRecord.objects.using(alias).filter(pk=result_id).delete()

        if transaction.get_connection(alias).in_atomic_block and not _stores_jobs_in(queue, alias):
            push_after_commit(
                queue, prepared, using=alias, on_failure=lambda exc: _push_failed(result_id, exc), on_sent=sent
            )
        else:
            if queue.runs_inline:  # the task runs inside this send: announce it first, as Django's ImmediateBackend
                task_enqueued.send(type(self), task_result=_to_result(record, task))
            try:
                sent_id = queue.send(prepared)
            except BaseException:
                TaskResultRecord.objects.using(alias).filter(pk=result_id).delete()
                raise
            if sent_id != prepared.id:
                sent(sent_id)
                return self._holder_result(sent_id, task, alias)  # type: ignore[return-value]
            if queue.runs_inline:
                return _to_result(TaskResultRecord.objects.using(alias).get(pk=result_id), task)  # type: ignore[return-value]
        result = _to_result(TaskResultRecord.objects.using(alias).get(pk=result_id), task)
        task_enqueued.send(type(self), task_result=result)
        return result  # type: ignore[return-value]  # built from this very task: same _P and _R

    def _holder_result(self, job_id: str, task: AnyTask, alias: str) -> AnyTaskResult:
        """The result of the waiting task whose job ``job_id`` holds the unique key (``unique_for``)."""
        record = TaskResultRecord.objects.using(alias).filter(job_id=job_id).first()
        if record is None:
            raise DuplicateTaskError(
                f"task {task.module_path!r} is unique and its key is held by job {job_id}, whose result is gone"
            )
        return _to_result(record, task)

    def get_result(self, result_id: str) -> AnyTaskResult:
        """The stored result; from inside a running event loop (a sync ``refresh()`` in async code, which
        Django's API allows and its own tests do) the read runs in a thread of its own, since the ORM
        refuses to block a loop's thread; ``aget_result()``/``arefresh()`` are the non-blocking way."""
        if _in_event_loop():
            return _off_loop(self._read_result, result_id)
        return self._read_result(result_id)

    def _read_result(self, result_id: str) -> AnyTaskResult:
        try:
            record = TaskResultRecord.objects.get(pk=result_id)
        except (TaskResultRecord.DoesNotExist, ValueError):
            raise TaskResultDoesNotExist(result_id) from None
        return _to_result(record, _load_task(record.task_path))


def _in_event_loop() -> bool:
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _off_loop(read: Callable[[str], AnyTaskResult], result_id: str) -> AnyTaskResult:
    """``read(result_id)`` in a new thread, waited for; that thread's database connections are closed after."""
    import threading

    from django.db import connections as db_connections

    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, read(result_id)))
        except BaseException as exc:
            outcome.append((False, exc))
        finally:
            db_connections.close_all()

    thread = threading.Thread(target=run, name="kinetis-queue-get-result")
    thread.start()
    thread.join()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


class DuplicateTaskError(KinetisQueueError):
    """A unique task's key is held by a job whose result row no longer exists (pruned or deleted)."""


def _push_options(task: AnyTask, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The push keywords of a KinetisTask's options: its attempt cap, and its unique key (a digest of the
    task's path and its arguments as JSON: the same task with the same arguments is the same key, and
    arguments of any size fit the key's length limit)."""
    if not isinstance(task, KinetisTask):
        return {}
    options: dict[str, Any] = {"max_attempts": task.max_attempts, "expires": task.expires}
    if task.unique_for is not None:
        canonical = json.dumps([task.module_path, args, kwargs], sort_keys=True, separators=(",", ":"))
        options["unique_key"] = hashlib.sha256(canonical.encode()).hexdigest()
        options["unique_for"] = task.unique_for
        options["unique_until"] = task.unique_until
    return options


def _with_attempt_rules(prepared: PreparedPush, task: AnyTask) -> PreparedPush:
    """``prepared`` with the task's retry rule and time limit in its envelope's metadata, where the worker
    reads them (RETRY_KEY and TIMEOUT_KEY, kinetis_queue.payload.envelope)."""
    if not isinstance(task, KinetisTask):
        return prepared
    extra: dict[str, Any] = {}
    if task.retry_delay is not None or task.backoff != "exponential":
        rule: dict[str, Any] = {"backoff": task.backoff}
        if task.retry_delay is not None:
            rule["delay"] = task.retry_delay
        extra[RETRY_KEY] = rule
    if task.timeout is not None:
        extra[TIMEOUT_KEY] = task.timeout
    if not extra:
        return prepared
    envelope = replace(prepared.envelope, metadata={**prepared.envelope.metadata, **extra})
    return replace(prepared, envelope=envelope)


def _load_task(path: str) -> AnyTask:
    """The django.tasks Task stored as ``path``, looked up in a module this process already imported.

    Raises JobReconstructionError when the module was never imported (it is not imported now), or
    the name holds no Task (registry.py says why).
    """
    found = registry.lookup(path)
    if isinstance(found, Task):
        return found
    why = registry.why_unresolved(path, "a django.tasks Task")
    raise JobReconstructionError(f"task {path!r} cannot be resolved: {why}")


def _stores_jobs_in(queue: Queue, alias: str) -> bool:
    """Whether ``queue`` writes its jobs through Django's connection for ``alias`` (the SQL backend
    on that database): then a push inside ``atomic()`` commits or rolls back with the result row."""

    return isinstance(queue, SqlQueue) and queue.database == alias


def _push_failed(result_id: str, exc: Exception) -> None:
    """The commit hook could not push the task: its committed READY result becomes FAILED, with why."""
    error = {
        "exception_class_path": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "traceback": "The task was not pushed after the enqueueing transaction committed:\n"
        + "".join(traceback.format_exception(exc)),
    }
    alias = router.db_for_write(TaskResultRecord)
    with write_atomic(alias):
        record = TaskResultRecord.objects.using(alias).select_for_update().filter(pk=result_id).first()
        if record is None or record.status != TaskResultStatus.READY:
            return
        record.status = TaskResultStatus.FAILED
        record.finished_at = timezone.now()
        record.errors = [*record.errors, error]
        record.save()
    task = _load_task(record.task_path)
    task_finished.send(sender=type(task.get_backend()), task_result=_to_result(record, task))


def _to_result(record: TaskResultRecord, task: AnyTask) -> AnyTaskResult:
    changes: dict[str, Any] = {"queue_name": record.queue_name, "backend": record.backend}
    if record.run_after is not None:
        changes["run_after"] = record.run_after
    result: AnyTaskResult = TaskResult(
        task=task.using(**changes),
        id=record.id,
        status=TaskResultStatus(record.status),
        enqueued_at=record.enqueued_at,
        started_at=record.started_at,
        finished_at=record.finished_at,
        last_attempted_at=record.last_attempted_at,
        args=record.args,
        kwargs=record.kwargs,
        backend=record.backend,
        errors=[TaskError(**error) for error in record.errors],
        worker_ids=list(record.worker_ids),
    )
    if record.status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", record.return_value)
    return result


def _owns(record: TaskResultRecord, job_id: str, attempt: int, *, starting: bool) -> bool:
    """Whether the run (``job_id``, delivery ``attempt``) may write ``record``: the fence.

    The row belongs to the job that last started a run on it (``record.job_id``; None before any
    run). Within one job a later delivery attempt takes over from an earlier one, never the reverse.
    A different job (a retry of one that failed for good, with a new id and attempts from 1 again)
    takes the row over when it starts a run, unless the row is RUNNING under its job or SUCCESSFUL.
    """
    if record.job_id is None or record.job_id == job_id:
        return record.attempt <= attempt
    return starting and record.status in (TaskResultStatus.READY, TaskResultStatus.FAILED)


def _fenced_update(
    result_id: str, job_id: str, attempt: int, change: Callable[[TaskResultRecord], None], *, starting: bool = False
) -> TaskResultRecord | None:
    """Apply ``change`` to the row if this run still owns it (see _owns); None when it does not."""
    alias = router.db_for_write(TaskResultRecord)
    with write_atomic(alias):
        record = TaskResultRecord.objects.using(alias).select_for_update().filter(pk=result_id).first()
        if record is None or not _owns(record, job_id, attempt, starting=starting):
            return None
        change(record)
        record.save()
        return record


def row_snooze_delay(snoozes: int) -> float:
    """The delay of the snooze after ``snoozes`` earlier ones, waiting for a result row: 1, 2, 4 ... 15 s."""
    return float(min(MAX_ROW_SNOOZE, 2 ** min(snoozes, 10)))


def _row_wait(backend: str) -> float:
    """``OPTIONS["RESULT_ROW_WAIT"]`` of the TASKS backend the task was enqueued through."""
    from django.conf import settings

    options = getattr(settings, "TASKS", {}).get(backend, {}).get("OPTIONS", {})
    value = options.get("RESULT_ROW_WAIT", RESULT_ROW_WAIT)
    # A bad value is reported by the system check (kinetis_queue.E102); here the default applies.
    return float(value) if type(value) in (int, float) and 0 <= value < float("inf") else float(RESULT_ROW_WAIT)


class RunTask(Job):
    """The job that runs one django.tasks task; pushed by KinetisTaskBackend.enqueue()."""

    # The task's arguments are Sensitive: django.tasks has no way to mark them, so no log shows them.
    def __init__(
        self,
        task_path: str,
        args: Annotated[list[Any], Sensitive],
        kwargs: Annotated[dict[str, Any], Sensitive],
        result_id: str,
        backend: str,
    ) -> None:
        self.task_path = task_path
        self.args = args
        self.kwargs = kwargs
        self.result_id = result_id
        self.backend = backend

    def concurrency_limit_for(self) -> ConcurrencyLimit | None:
        """The task's ``concurrency_limit`` (read from its definition, so a deploy changing it applies to
        waiting tasks); None when the task has none or cannot be found (its run then fails, saying why)."""
        try:
            task = _load_task(self.task_path)
        except JobReconstructionError:
            return None
        if not isinstance(task, KinetisTask) or task.concurrency_limit is None:
            return None
        key = task.concurrency_key or f"django.tasks:{task.module_path}"
        return ConcurrencyLimit(key, task.concurrency_limit, DEFAULT_DELAY)

    def rate_limit_for(self) -> tuple[RateLimit, str] | None:
        """The task's ``rate_limit`` and its key (read from its definition, as its concurrency limit is); None when
        the task has none or cannot be found (kinetis_queue.ratelimits asks this of a carrier job)."""
        try:
            task = _load_task(self.task_path)
        except JobReconstructionError:
            return None
        if not isinstance(task, KinetisTask) or task.rate_limit is None:
            return None
        return as_rate_limit(task.rate_limit, "rate_limit"), task.rate_key or f"django.tasks:{task.module_path}"

    @classmethod
    def display_name(cls, args: Mapping[str, Any]) -> str:
        """The task's own import path, not RunTask's."""
        path = args.get("task_path")
        return path if isinstance(path, str) and path else super().display_name(args)

    def handle(self, context: JobContext) -> None:
        task = _load_task(self.task_path)
        now = timezone.now()

        def start(record: TaskResultRecord) -> None:
            if record.job_id != context.id:  # the first run of this job: a retry starts afresh
                record.finished_at = None
                record.return_value = None
            record.job_id = context.id
            record.attempt = context.attempts
            record.status = TaskResultStatus.RUNNING
            record.started_at = record.started_at or now
            record.last_attempted_at = now
            record.worker_ids = [*record.worker_ids, WORKER_ID]  # before the run: context.attempt counts it

        record = _fenced_update(self.result_id, context.id, context.attempts, start, starting=True)
        if record is None:
            if (
                not TaskResultRecord.objects.using(router.db_for_write(TaskResultRecord))
                .filter(pk=self.result_id)
                .exists()
            ):
                self._wait_for_row(context)
            context.logger.warning(
                "task result %s belongs to another delivery (running, finished or later); this one does not run",
                self.result_id,
            )
            return
        backend_class = type(task.get_backend())
        result = _to_result(record, task)
        task_started.send(sender=backend_class, task_result=result)
        try:
            prefix: tuple[Any, ...] = (TaskContext(task_result=result),) if task.takes_context else ()
            value = task.call(*prefix, *self.args, **self.kwargs)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            self._record_error(context, exc, status=TaskResultStatus.READY)
            raise
        try:
            stored = json.loads(json.dumps(normalize_json(value), allow_nan=False))
        except (TypeError, ValueError) as exc:
            # The task's effects already happened: a value we cannot store is a final failure, not a retry.
            record = self._record_error(context, exc, status=TaskResultStatus.FAILED)
            if record is not None:
                task_finished.send(sender=backend_class, task_result=_to_result(record, task))
            return

        def succeed(record: TaskResultRecord) -> None:
            record.status = TaskResultStatus.SUCCESSFUL
            record.finished_at = timezone.now()
            record.return_value = stored

        record = _fenced_update(self.result_id, context.id, context.attempts, succeed)
        if record is not None:
            task_finished.send(sender=backend_class, task_result=_to_result(record, task))

    def _wait_for_row(self, context: JobContext) -> None:
        """No result row (yet): snooze while RESULT_ROW_WAIT allows, then fail with the reason.

        The row is written before the push, or in the same transaction, so a missing row is a
        commit still in flight (or a replica behind), a rolled-back transaction or a deleted row.
        Acking would lose the task; a snooze does not count against the failure cap.
        """
        waited = sum(row_snooze_delay(n) for n in range(context.snoozes))
        if waited < _row_wait(self.backend):
            raise Snooze(row_snooze_delay(context.snoozes), f"task result {self.result_id} is not visible yet")
        raise ResultRowMissingError(
            f"the task result row {self.result_id} never became visible (waited {waited:g}s over "
            f"{context.snoozes} snooze(s)): the enqueueing transaction rolled back or the row was deleted"
        )

    def _record_error(self, context: JobContext, exc: BaseException, *, status: str) -> TaskResultRecord | None:
        error = {
            "exception_class_path": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "traceback": "".join(traceback.format_exception(exc)),
        }

        def fail(record: TaskResultRecord) -> None:
            record.errors = [*record.errors, error]
            record.status = status
            if status == TaskResultStatus.FAILED:
                record.finished_at = timezone.now()

        return _fenced_update(self.result_id, context.id, context.attempts, fail)


_RUN_TASK = f"{RunTask.__module__}.{RunTask.__qualname__}"


def _on_failed_permanently(sender: Any, job: QueuedJob, **kwargs: Any) -> None:
    """The worker gave up on a RunTask delivery: its result becomes FAILED (and finished)."""
    if job.job_class != _RUN_TASK or not isinstance(job.args.get("result_id"), str):
        return

    def finish(record: TaskResultRecord) -> None:
        record.status = TaskResultStatus.FAILED
        record.finished_at = record.finished_at or timezone.now()

    record = _fenced_update(job.args["result_id"], job.id, job.attempts, finish)
    if record is not None:
        task = _load_task(record.task_path)
        task_finished.send(sender=type(task.get_backend()), task_result=_to_result(record, task))


signals.job_failed_permanently.connect(_on_failed_permanently, dispatch_uid="kinetis_queue.tasks.failed")
