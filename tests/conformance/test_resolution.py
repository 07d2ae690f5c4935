"""What a stored payload may name (DESIGN.md §2, kinetis_queue/payload/registry.py), and what push() accepts.

A worker rebuilds only job classes, queued receivers and tasks this process registered before the
message arrived; it never imports a module because a payload named it. tests/import_effects.py is
a module of the installed app "tests" that no test imports: each test here names something in it
and checks it stayed unimported.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest

from kinetis_queue import Job, JobContext
from kinetis_queue.contracts import Queue
from kinetis_queue.contrib.receivers import QueuedReceiverJob
from kinetis_queue.exceptions import JobReconstructionError, UnrunnableJobError
from kinetis_queue.models import FailedJob
from kinetis_queue.payload import registry
from kinetis_queue.worker import Worker
from tests import jobs
from tests.conformance.test_worker import _rewrite_stored_job
from tests.support.backends import Backend
from tests.unpushable_jobs import CountingHandle, NoHandle, Undiscovered

EFFECTS = "tests.import_effects"
NEVER_IMPORTED = f"its module {EFFECTS!r} was never imported in this process"
SECRET = "s3cr3t-ARGUMENT-value"


@pytest.fixture(autouse=True)
def _effects_module_unimported() -> None:
    assert EFFECTS not in sys.modules, "a test imported tests.import_effects: these tests would prove nothing"


def _failure_of(connection: Queue, backend: Backend, queue_name: str, job: Job) -> tuple[str, str]:
    """Push ``job`` (max_attempts=1) and let a worker take it: the (exception class, message) it failed with.

    On sync the job runs inside push(), which raises; elsewhere the worker records a FailedJob.
    """
    if not backend.stores_jobs:
        with pytest.raises(Exception) as raised:
            connection.push(job, queue=queue_name, max_attempts=1)
        error = raised.value
        return f"{type(error).__module__}.{type(error).__qualname__}", str(error)
    job_id = connection.push(job, queue=queue_name, max_attempts=1)
    return _work_one(connection, queue_name, job_id)


def _work_one(connection: Queue, queue_name: str, job_id: str) -> tuple[str, str]:
    worker = Worker(connection)
    try:
        assert worker.process_next(5, [queue_name]) is True
    finally:
        worker.close()
    assert connection.size(queue_name) == 0
    record = FailedJob.objects.get(job_id=job_id)
    return record.exception_class, record.exception_message


@pytest.mark.trait("stores_jobs")
@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_stored_class_in_an_unimported_module_fails_the_job_and_is_never_imported(
    connection: Queue, backend: Backend, queue_name: str
) -> None:
    """Issue 12 item 7: the payload names a Job subclass in an installed app's module nothing imported."""
    job_id = connection.push(jobs.Noop(), queue=queue_name, max_attempts=1)
    _rewrite_stored_job(backend, job_id, f"{EFFECTS}.Effect", {})
    exception_class, message = _work_one(connection, queue_name, job_id)
    assert EFFECTS not in sys.modules
    assert exception_class == "kinetis_queue.exceptions.JobReconstructionError"
    assert message.startswith(f"job class '{EFFECTS}.Effect' cannot be resolved: {NEVER_IMPORTED}")
    assert "KINETIS_QUEUE['IMPORTS']" in message


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_receiver_in_an_unimported_module_fails_the_job_and_is_never_imported(
    connection: Queue, backend: Backend, queue_name: str
) -> None:
    """Issue 12 item 7, for a queued receiver's path (sync: push() raises it)."""
    job = QueuedReceiverJob(f"{EFFECTS}.effect_receiver", None, {"token": SECRET})
    exception_class, message = _failure_of(connection, backend, queue_name, job)
    assert EFFECTS not in sys.modules
    assert exception_class == "kinetis_queue.exceptions.JobReconstructionError"
    assert message.startswith(f"queued receiver '{EFFECTS}.effect_receiver' cannot be resolved: {NEVER_IMPORTED}")
    assert SECRET not in message


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_task_in_an_unimported_module_fails_the_job_and_is_never_imported(
    connection: Queue, backend: Backend, queue_name: str
) -> None:
    """Issue 12 item 7, for a django.tasks task path (sync: push() raises it)."""
    tasks = pytest.importorskip("kinetis_queue.contrib.tasks.backend", reason="django.tasks is not installed")
    job = tasks.RunTask(f"{EFFECTS}.effect_task", [SECRET], {}, "0" * 32, "default")
    exception_class, message = _failure_of(connection, backend, queue_name, job)
    assert EFFECTS not in sys.modules
    assert exception_class == "kinetis_queue.exceptions.JobReconstructionError"
    assert message.startswith(f"task '{EFFECTS}.effect_task' cannot be resolved: {NEVER_IMPORTED}")
    assert SECRET not in message


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("tests.jobs.NoSuchJob", "module 'tests.jobs' has no attribute 'NoSuchJob'"),
        ("tests.NoSuchJob", "module 'tests' has no attribute 'NoSuchJob'"),
        ("tests.jobs.Color", "it is not a Job subclass"),
        ("tests.jobs", "it is a module, not a Job subclass"),
        ("os.system", "it is not a Job subclass"),
        (f"{EFFECTS}.Effect", NEVER_IMPORTED),
        ("no_such_package.jobs.Job", "its module 'no_such_package.jobs' was never imported in this process"),
    ],
)
def test_an_unresolvable_class_names_the_real_reason(path: str, reason: str) -> None:
    """Issue 12 item 15: not "is not a known Job subclass", but why."""
    with pytest.raises(JobReconstructionError) as raised:
        registry.resolve_job_class(path)
    assert str(raised.value).startswith(f"job class {path!r} cannot be resolved: {reason}")
    assert EFFECTS not in sys.modules and "no_such_package" not in sys.modules


def test_a_class_whose_module_failed_at_discovery_names_that_modules_error() -> None:
    """Issue 12 item 15: the ImportError of its module, as discovery saw it."""
    from django.test import override_settings

    from tests.settings import KINETIS_QUEUE

    with override_settings(KINETIS_QUEUE={**KINETIS_QUEUE, "IMPORTS": ["tests.broken_app.jobs"]}):
        [failure] = registry.discover()
    assert failure.module == "tests.broken_app.jobs" and isinstance(failure.error, ImportError)
    with pytest.raises(JobReconstructionError) as raised:
        registry.resolve_job_class("tests.broken_app.jobs.Anything")
    assert str(raised.value) == (
        "job class 'tests.broken_app.jobs.Anything' cannot be resolved: its module 'tests.broken_app.jobs' "
        f"failed to import at start-up (ImportError: {failure.error})"
    )
    assert "cannot import name 'NoSuchName'" in str(raised.value)


# -- push() rejects what no worker can run (issue 12 item 10) --------------------------------------------------------


class MainModule(Job):
    def __init__(self, token: str = "") -> None:
        self.token = token

    def handle(self) -> None:
        jobs.CALLS.append(("MainModule",))


MainModule.__module__ = "__main__"


def _local_class() -> type[Job]:
    class Local(Job):
        def __init__(self, token: str = "") -> None:
            self.token = token

        def handle(self) -> None:
            jobs.CALLS.append(("Local",))

    return Local


def _shell_class() -> type[Job]:
    """As ``manage.py shell`` defines a class: its namespace has no __name__, so __module__ is "builtins"."""
    namespace: dict[str, Any] = {"Job": Job, "jobs": jobs}
    exec(
        "class InShell(Job):\n"
        "    def __init__(self, token=''):\n        self.token = token\n"
        "    def handle(self):\n        jobs.CALLS.append(('InShell',))\n",
        namespace,
    )
    cls: type[Job] = namespace["InShell"]
    return cls


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda: NoHandle, "defines no handle()"),
        (lambda: CountingHandle, "handle() parameter 'count' cannot be resolved"),
        (lambda: MainModule, "defined in __main__"),
        (_local_class, "defined inside a function"),
        (_shell_class, "not found under that name in an importable module"),
        (lambda: Undiscovered, "its module 'tests.unpushable_jobs' is not one a worker imports at start-up"),
    ],
    ids=["no-handle", "uncallable-handle", "main-module", "local-class", "shell-class", "undiscovered-module"],
)
def test_push_rejects_a_job_no_worker_can_run_and_stores_nothing(
    connection: Queue, backend: Backend, queue_name: str, make: Any, reason: str
) -> None:
    cls = make()
    with pytest.raises(UnrunnableJobError) as raised:
        connection.push(cls(token=SECRET), queue=queue_name)
    message = str(raised.value)
    assert isinstance(raised.value, TypeError)
    assert message.startswith(f"{cls.__module__}.{cls.__qualname__}") and reason in message
    assert SECRET not in message
    assert jobs.CALLS == []  # sync ran nothing
    assert connection.size(queue_name) == 0


class CountedPush(Job):
    def handle(self, context: JobContext) -> None:
        jobs.CALLS.append(("CountedPush",))


def test_the_runnable_check_runs_once_per_class(monkeypatch: pytest.MonkeyPatch) -> None:
    """push() is a hot path: the class is inspected on its first push only."""
    from kinetis_queue import connections

    calls: list[type] = []
    original = registry.runnable_problem

    def counting(cls: type[Job]) -> str | None:
        calls.append(cls)
        return original(cls)

    monkeypatch.setattr(registry, "runnable_problem", counting)
    monkeypatch.delitem(registry._runnable, CountedPush, raising=False)
    queue = connections.build("sync")
    queue.push(CountedPush())
    queue.push(CountedPush())
    assert calls == [CountedPush]
    assert jobs.CALLS == [("CountedPush",), ("CountedPush",)]


def test_a_job_class_is_accepted_once_its_module_is_listed_in_imports(
    connection: Queue, backend: Backend, queue_name: str
) -> None:
    """Issue 27 item 13: the rule is the worker's (a discovery module); listing the module lifts the refusal,
    and a worker with those settings then runs the job."""
    from django.conf import settings
    from django.test import override_settings

    with pytest.raises(UnrunnableJobError):
        connection.push(Undiscovered(), queue=queue_name)
    imports = [*settings.KINETIS_QUEUE["IMPORTS"], "tests.unpushable_jobs"]
    with override_settings(KINETIS_QUEUE={**settings.KINETIS_QUEUE, "IMPORTS": imports}):
        job_id = connection.push(Undiscovered(), queue=queue_name)
        if backend.stores_jobs:
            worker = Worker(connection)
            try:
                assert worker.process_next(5, [queue_name]) is True
            finally:
                worker.close()
    assert job_id and jobs.CALLS == [("Undiscovered",)]
    with pytest.raises(UnrunnableJobError):  # the settings restored, the verdict is the old one again
        connection.push(Undiscovered(), queue=queue_name)
