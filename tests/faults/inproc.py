"""In-process workers and timed calls for the connection-fault scenarios (RELIABILITY.md §3 B, C).

A connection fault is about one client's calls, so these scenarios run their workers as threads
of the test process: each call can be timed ("no call hangs past its timeout"), client timeouts
can be short, and a stopped worker is replaced in milliseconds rather than a process start.

- ``CallTimer`` wraps a queue's push/pop/ack/release/fail/renew and keeps, per operation, the
  longest time a call took beyond what it was asked to wait (``pop(timeout)`` may look for
  ``timeout`` seconds), and the errors it raised.
- ``ThreadWorkers`` keeps N workers running, each a ``Worker`` on a queue of its own. A worker
  that an exception stops writes ``worker.stop`` into the history (as ``tests/faults/worker.py``
  does) and is replaced by a fresh worker on a fresh queue: what a supervisor does for a process.
- ``Route`` builds queues whose connections go through a ``FaultProxy``, with short client
  timeouts, and says how long each call may take.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connections as db_connections

from kinetis_queue import conf, connections
from kinetis_queue.contracts import DisposableQueue, Queue
from kinetis_queue.worker import Worker
from tests.faults import history
from tests.faults.faultproxy import FaultProxy
from tests.faults.worker import where
from tests.support.backends import Backend

#: The operations a worker or a pusher calls on a queue.
OPERATIONS = ("push", "pop", "ack", "release", "fail", "renew")
#: Slack on every bound: the brief's "within its configured timeout + 1 s".
SLACK = 1.0


class CallTimer:
    """Times every call of the operations of the queues it wraps; thread-safe."""

    def __init__(self) -> None:
        self.longest: dict[str, float] = {}
        self.calls: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self._lock = threading.Lock()

    def wrap(self, queue: Queue) -> Queue:
        for name in OPERATIONS:
            method = getattr(queue, name, None)
            if method is not None:
                setattr(queue, name, self._timed(name, method))
        return queue

    def _timed(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            began = time.monotonic()
            failed: str | None = None
            try:
                return method(*args, **kwargs)
            except Exception as exc:
                failed = type(exc).__name__
                raise
            finally:
                waited = float(args[0]) if name == "pop" and args else 0.0
                beyond = time.monotonic() - began - waited
                with self._lock:
                    self.calls[name] += 1
                    self.longest[name] = max(self.longest.get(name, 0.0), beyond)
                    if failed is not None:
                        self.errors[f"{name}:{failed}"] += 1

        return call

    def figures(self) -> dict[str, Any]:
        with self._lock:
            return {
                "longest_call_beyond_wait_s": {k: round(v, 2) for k, v in sorted(self.longest.items())},
                "call_errors": dict(sorted(self.errors.items())),
            }


def dispose(queue: Queue) -> None:
    if isinstance(queue, DisposableQueue):
        queue.dispose()


class ThreadWorkers:
    """``size`` workers in threads of this process; each stopped one is counted and replaced."""

    def __init__(
        self,
        make_queue: Callable[[], Queue],
        queues: Sequence[str],
        size: int,
        timer: CallTimer,
        *,
        poll: float = 0.5,
        **worker_options: Any,
    ) -> None:
        self.make_queue, self.queues, self.size, self.timer = make_queue, list(queues), size, timer
        self.poll, self.worker_options = poll, {"retry_base_delay": 0, **worker_options}
        self.stops: Counter[str] = Counter()
        self._halt = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def __enter__(self) -> ThreadWorkers:
        for i in range(self.size):
            thread = threading.Thread(target=self._run, name=f"fault-worker-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def __exit__(self, *exc: object) -> None:
        self.halt()

    def halt(self, timeout: float = 30) -> list[str]:
        """Stop every worker between jobs; return the names of threads still running after ``timeout``."""
        self._halt.set()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return [thread.name for thread in self._threads if thread.is_alive()]

    @property
    def stopped(self) -> int:
        with self._lock:
            return sum(self.stops.values())

    def _run(self) -> None:
        try:
            while not self._halt.is_set():
                try:
                    queue = self.timer.wrap(self.make_queue())
                except Exception as exc:  # cannot even build the queue: count it as a stop and retry
                    self._stopped(exc)
                    continue
                worker = Worker(queue, **self.worker_options)
                try:
                    while not self._halt.is_set():
                        worker.process_next(self.poll, self.queues)
                except Exception as exc:
                    self._stopped(exc)
                finally:
                    worker.close()
                    try:
                        dispose(queue)
                    except Exception:  # a connection already broken: nothing left to close
                        pass
                    db_connections.close_all()  # the next worker starts afresh, as a new process would
        finally:
            db_connections.close_all()

    def _stopped(self, exc: Exception) -> None:
        step = where(exc.__traceback__)
        history.record("worker.stop", None, error=type(exc).__name__, step=step)
        with self._lock:
            self.stops[f"{step}:{type(exc).__name__}"] += 1
        time.sleep(0.05)  # what a respawn costs at least; never a hot loop on a dead server


class RenewalLog(logging.Handler):
    """Counts the worker's "lease renewal(s) failed" lines, per delivery (job id, attempt)."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.per_delivery: Counter[tuple[str, int]] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        if "lease renewal(s) failed" in str(record.msg):
            self.per_delivery[(getattr(record, "job_id", "?"), getattr(record, "attempt", 0))] += 1

    @contextmanager
    def attached(self) -> Iterator[RenewalLog]:
        logger = logging.getLogger("kinetis_queue.worker")
        logger.addHandler(self)
        try:
            yield self
        finally:
            logger.removeHandler(self)


@dataclasses.dataclass
class Route:
    """Queues of one backend whose connections go through ``proxy``, and the bound on each call."""

    backend: Backend
    proxy: FaultProxy
    make: Callable[[], Queue]
    #: Seconds one client-side wait may last (a connect, a reply), as configured here.
    client_timeout: float
    #: Attempts of one call (botocore's standard retry mode repeats an SQS call up to 3 times).
    attempts: int = 1
    #: Seconds of retry backoff at most within one call (botocore: under 1 s, then under 2 s).
    backoff: float = 0.0
    #: SQS waits in whole seconds: a pop can outlast its deadline by up to a second (the contract).
    pop_overrun: float = 0.0
    #: Whether push() goes through the proxy (False on SQL: push uses Django's own connection).
    pushes_proxied: bool = True
    #: The proxied DATABASES alias (SQL only).
    alias: str | None = None
    cleanup: Callable[[], None] = lambda: None

    def bound(self, operation: str) -> float:
        """How long ``operation`` may take beyond the wait it was asked for, slack included.

        On SQS a push is SendMessage, sent once, after a queue's first push has looked its URL up
        (GetQueueUrl, retried like every other call).
        """
        attempts = self.attempts + 1 if operation == "push" and self.attempts > 1 else self.attempts
        overrun = self.pop_overrun if operation == "pop" else 0.0
        return attempts * self.client_timeout + (self.backoff if attempts > 1 else 0.0) + overrun + SLACK

    def close(self) -> None:
        self.cleanup()
        self.proxy.close()


def route(
    backend: Backend, queue_name: str, seed: int, monkeypatch: pytest.MonkeyPatch, visibility_timeout: int = 1
) -> Route:
    """A fault proxy in front of ``backend``'s server and a factory of queues that use it."""
    base = conf.connection_settings(backend.connection)
    if backend.database is not None:
        return _sql_route(backend, seed, visibility_timeout)
    if base.backend == "redis":
        from urllib.parse import urlsplit, urlunsplit

        parts = urlsplit(base.options["URL"])
        proxy = FaultProxy(parts.hostname or "127.0.0.1", parts.port or 6379, seed=seed)
        proxy.start()
        url = urlunsplit(parts._replace(netloc=f"127.0.0.1:{proxy.port}"))
        proxied = dataclasses.replace(
            base, visibility_timeout=visibility_timeout, options={**base.options, "URL": url, "SOCKET_TIMEOUT": 1}
        )
        return Route(backend, proxy, lambda: connections.backend_class(base).from_settings(proxied), 1.0)
    if base.backend == "sqs":
        from urllib.parse import urlsplit

        from kinetis_queue.backends.sqs import queue as sqs
        from tests.support.fixtures import BACKEND_SUPPORT

        fifo = base.options.get("FIFO", False)
        # The backend never creates a queue (a FIFO connection's SQS name ends in .fifo).
        BACKEND_SUPPORT[backend.id].create(queue_name + (".fifo" if fifo else ""))
        monkeypatch.setattr(sqs, "CONNECT_TIMEOUT", 1)
        monkeypatch.setattr(sqs, "READ_TIMEOUT", 2)
        parts = urlsplit(base.options["ENDPOINT_URL"])
        proxy = FaultProxy(parts.hostname or "127.0.0.1", parts.port or 80, seed=seed)
        proxy.start()
        endpoint = f"http://127.0.0.1:{proxy.port}"

        def make_sqs() -> Queue:
            return sqs.SqsQueue(
                region=base.options.get("REGION"),
                endpoint_url=endpoint,
                visibility_timeout=visibility_timeout,
                connection=base.name,
                fifo=fifo,
                message_group=base.options.get("MESSAGE_GROUP", "message"),
            )

        return Route(backend, proxy, make_sqs, 2.0, attempts=3, backoff=3.0, pop_overrun=1.0)
    if base.backend == "rabbitmq":
        from urllib.parse import urlsplit, urlunsplit

        from kinetis_queue.backends.rabbitmq import queue as rabbitmq_queue
        from kinetis_queue.backends.rabbitmq import session

        for module, name in (
            (session, "CONNECT_TIMEOUT"),
            (session, "OPERATION_TIMEOUT"),
            (rabbitmq_queue, "CONFIRM_TIMEOUT"),
        ):
            monkeypatch.setattr(module, name, 2.0)
        parts = urlsplit(base.options["URL"])
        proxy = FaultProxy(parts.hostname or "127.0.0.1", parts.port or 5672, seed=seed)
        proxy.start()
        url = urlunsplit(parts._replace(netloc=f"{parts.username}:{parts.password}@127.0.0.1:{proxy.port}"))
        return Route(
            backend,
            proxy,
            lambda: rabbitmq_queue.RabbitMqQueue(
                url=url, heartbeat=2, connection=base.name, queue_type=base.options.get("QUEUE_TYPE", "classic")
            ),
            2.0,
        )
    raise NotImplementedError(f"no fault route for {backend.id}")


#: The worker-side bound of the SQL test routes (OPERATION_TIMEOUT; libpq's connect_timeout is at least 2).
SQL_OPERATION_TIMEOUT = 2.0


def _sql_route(backend: Backend, seed: int, visibility_timeout: int) -> Route:
    """A copy of the backend's alias whose PORT is the proxy's; pushes stay on the real alias.

    push() runs on Django's own connection for the alias (it may join the caller's transaction),
    which the queue does not configure: only the worker's side goes through the proxy.
    """
    from kinetis_queue.backends.sql import SqlQueue

    database = backend.database or ""
    real = db_connections[database].settings_dict
    proxy = FaultProxy(real["HOST"] or "127.0.0.1", int(real["PORT"]), seed=seed)
    proxy.start()
    alias = f"{database}_fault{proxy.port}"
    entry = copy.deepcopy(db_connections.settings[database])
    entry.update(NAME=real["NAME"], HOST="127.0.0.1", PORT=str(proxy.port))
    if "postgresql" in entry["ENGINE"]:
        entry["OPTIONS"] = {**entry.get("OPTIONS", {}), "sslmode": "disable"}
    db_connections.settings[alias] = entry

    def cleanup() -> None:
        db_connections[alias].close()
        db_connections.settings.pop(alias, None)

    def make_sql() -> Queue:
        return SqlQueue(
            database=alias,
            visibility_timeout=visibility_timeout,
            connection=backend.connection,
            operation_timeout=SQL_OPERATION_TIMEOUT,
        )

    return Route(
        backend, proxy, make_sql, SQL_OPERATION_TIMEOUT + 0.25, pushes_proxied=False, alias=alias, cleanup=cleanup
    )


class Pusher(threading.Thread):
    """Pushes ``count`` tagged jobs at about ``rate`` per second, each recorded (push.invoke, push.ok, ...)."""

    def __init__(self, queue: Queue, queue_name: str, jobs: Sequence[Any], rate: float) -> None:
        super().__init__(name="fault-pusher", daemon=True)
        self.queue, self.queue_name, self.jobs, self.rate = queue, queue_name, list(jobs), rate

    def run(self) -> None:
        from tests.faults.harness import push

        try:
            for job in self.jobs:
                push(self.queue, job, self.queue_name)
                time.sleep(1 / self.rate)
        finally:
            db_connections.close_all()
