"""``manage.py queue_work``: run a worker on one connection (or N of them with ``--processes``)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.core.management.base import CommandError, CommandParser

from kinetis_queue import conf, connections
from kinetis_queue.contracts import DisposableQueue, Queue, RenewableQueue
from kinetis_queue.control import paused_queues
from kinetis_queue.db import tables
from kinetis_queue.exceptions import KinetisQueueError
from kinetis_queue.failed import failed_counts
from kinetis_queue.hooks import HookChain
from kinetis_queue.management.commands import _reload
from kinetis_queue.management.commands._arguments import (
    WeightedQueues,
    connection_name,
    positive_int,
    positive_number,
    queue_list,
    weighted_queue_list,
)
from kinetis_queue.management.commands._output import QueueCommand
from kinetis_queue.middleware import worker_hooks
from kinetis_queue.observability.liveness import HeartbeatFile, touch
from kinetis_queue.observability.logs import PlainFormatter
from kinetis_queue.observability.metrics import start_server
from kinetis_queue.observability.registry import WorkerRegistry
from kinetis_queue.observability.setup import missing_libraries
from kinetis_queue.outbox.relay import Relay
from kinetis_queue.payload import registry
from kinetis_queue.payload.printable import printable
from kinetis_queue.schedules import declaration
from kinetis_queue.schedules.scheduler import Scheduler
from kinetis_queue.validation import MAX_RETRY_DELAY
from kinetis_queue.worker import DEFAULT_PREFETCH, ExitReason, JobOutcome, JobReport, Worker
from kinetis_queue.worker.background import BackgroundLoop
from kinetis_queue.worker.log import JOB_LOGGER
from kinetis_queue.worker.restart import marker_for
from kinetis_queue.worker.supervisor import supervise

if TYPE_CHECKING:
    from kinetis_queue.hooks import DeliveryHooks
    from kinetis_queue.schedules.declaration import Schedule

# Kept under their old names: queue_clear and other code import them from here.
_queue_list = queue_list
_connection = connection_name
_positive = positive_number


def _attempts(value: str) -> int:
    if not value.isdigit():
        raise argparse.ArgumentTypeError("must be an int of 0 or more")
    return int(value)


def _backoff(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a number of seconds") from None
    if not 0 <= number <= MAX_RETRY_DELAY:
        raise argparse.ArgumentTypeError(f"must be from 0 to {MAX_RETRY_DELAY} seconds")
    return number


#: -v 1 shows warnings and errors of the worker's log, -v 2 adds a line per job's log, -v 3 debug. The jobs'
#: own lines (``context.logger``, JOB_LOGGER) show from INFO on at -v 1 already, as any task logger's do.
LOG_LEVELS = {1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}
#: The queue watched when no --queue is given.
DEFAULT_QUEUES = ("default",)


def _refuse_failed_discovery() -> None:
    """A jobs/tasks/IMPORTS module that failed to import stops the worker before it takes any job:
    every message naming one of its classes would fail. The same message as check's E004."""
    failures = registry.discover()
    if failures:
        raise CommandError("the worker cannot start: discovery failed: " + "; ".join(map(str, failures)))


class Command(QueueCommand):
    help = (
        "Process jobs from a queue connection until stopped (SIGTERM/SIGINT stop between jobs) or a "
        "limit is reached; prints why it stopped. Exit status 0 for every controlled stop."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--connection", type=connection_name, help="connection name (default: DEFAULT_CONNECTION)")
        parser.add_argument(
            "--queue",
            type=weighted_queue_list,
            default=None,
            help=(
                "queues to watch, highest priority first: --queue high,default (default: default); with weights, "
                "turns in that proportion while each has work: --queue emails:4,reports:1; with slots, that many "
                "jobs of each at once in this process: --queue emails=8,reports=2 (--concurrency is their sum)"
            ),
        )
        parser.add_argument(
            "--sleep",
            type=positive_number,
            default=None,
            help="seconds each pop() looks for work before the loop checks for a stop (default: POLL_TIMEOUT)",
        )
        parser.add_argument(
            "--tries",
            type=_attempts,
            default=None,
            help="attempts for a job pushed without max_attempts (default: MAX_ATTEMPTS)",
        )
        parser.add_argument(
            "--backoff",
            type=_backoff,
            default=None,
            help=f"retry base delay in seconds, 0..{MAX_RETRY_DELAY} (default: RETRY_BASE_DELAY)",
        )
        parser.add_argument("--once", action="store_true", help="process at most one job, then exit")
        parser.add_argument(
            "--stop-when-empty", action="store_true", help="exit once a pop() finds no job within --sleep"
        )
        parser.add_argument(
            "--max-jobs",
            type=positive_int,
            default=None,
            help="exit after this many deliveries (retries and failures count)",
        )
        parser.add_argument(
            "--max-time",
            type=positive_number,
            default=None,
            help="exit between jobs once this many seconds have passed",
        )
        parser.add_argument(
            "--memory",
            type=positive_number,
            default=None,
            help="exit between jobs once resident memory reaches this many MB",
        )
        parser.add_argument(
            "--timeout",
            type=positive_number,
            default=None,
            help="hard limit in seconds on one attempt; it then fails as the job's own "
            "failure and follows the retry rules (default: TIMEOUT, none)",
        )
        parser.add_argument(
            "--concurrency",
            type=positive_int,
            default=1,
            help="run up to this many jobs at once in this process, in threads (default 1); "
            "async def handle() jobs share one event loop within the same bound",
        )
        parser.add_argument(
            "--prefetch",
            type=_attempts,
            default=DEFAULT_PREFETCH,
            help="reserve at most this many deliveries ahead of a free slot, adaptively "
            f"(default {DEFAULT_PREFETCH}; 0 disables)",
        )
        parser.add_argument(
            "--no-schedule",
            action="store_true",
            help="do not fire the declared schedules from this worker (by default every worker but --once "
            "fires them, each tick once across all of them; see queue_schedule)",
        )
        parser.add_argument(
            "--no-relay",
            action="store_true",
            help="do not relay the connection's outbox (OUTBOX) from this worker (by default every worker of "
            "such a connection does; see queue_relay)",
        )
        parser.add_argument(
            "--metrics-port",
            type=positive_int,
            default=None,
            help="serve Prometheus metrics on this port (KINETIS_QUEUE['METRICS'] must be on); with --processes, "
            "the sum of every child's",
        )
        parser.add_argument(
            "--reload",
            action="store_true",
            help="development: restart the worker when project code changes (Django's autoreloader, as "
            "runserver); a change lets the running job finish first",
        )
        parser.add_argument(
            "--heartbeat-file",
            type=Path,
            default=None,
            help="touch this file every second while the worker is alive (its loop turns or a job runs), for a "
            "liveness probe: queue_health --self --heartbeat-file PATH",
        )
        parser.add_argument(
            "--processes",
            type=positive_int,
            default=1,
            help="run this many worker processes under a supervisor (default 1)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        # Everything is validated before anything is printed or touched.
        try:
            settings = conf.connection_settings(options["connection"])
        except KinetisQueueError as exc:
            raise CommandError(str(exc)) from exc
        _refuse_failed_discovery()
        schedules = [] if options["no_schedule"] or options["once"] else _declared_schedules()
        verbosity: int = options["verbosity"]
        if options["reload"] and options["processes"] > 1:
            raise CommandError("--reload runs one worker process: leave out --processes")
        if options["heartbeat_file"] is not None and options["processes"] > 1:
            raise CommandError(
                "--heartbeat-file tells the liveness of one worker process: leave out --processes (run one "
                "worker process per container)"
            )
        if options["reload"] and not _reload.in_child():  # the parent: the child does the work (and metrics)
            status = _reload.run_parent(self._say if verbosity >= 1 else lambda line: None)
            if status != 0:
                raise CommandError("the reloading worker ended with a non-zero status", returncode=status)
            return
        _serve_metrics(options["metrics_port"], options["processes"])
        if options["processes"] > 1:
            self._supervise(options["processes"], verbosity)
            return
        timeout = options["sleep"] if options["sleep"] is not None else settings.poll_timeout
        tries = options["tries"] if options["tries"] is not None else settings.max_attempts
        backoff = options["backoff"] if options["backoff"] is not None else settings.retry_base_delay
        job_timeout = options["timeout"] if options["timeout"] is not None else settings.timeout
        chosen: WeightedQueues | None = options["queue"]
        queues: tuple[str, ...] = chosen.names if chosen is not None else DEFAULT_QUEUES
        weights = chosen.weights if chosen is not None else {}
        slots = chosen.slots if chosen is not None else {}
        concurrency: int = options["concurrency"]
        if slots:
            if concurrency not in (1, sum(slots.values())):
                raise CommandError(
                    f"--concurrency is the sum of the queues' slots ({sum(slots.values())}) when --queue gives them: "
                    "leave it out"
                )
            concurrency = sum(slots.values())
        heartbeat = _heartbeat_file(options["heartbeat_file"], timeout)
        try:
            queue = connections.build(settings.name)
        except KinetisQueueError as exc:
            raise CommandError(str(exc)) from exc
        try:
            tables.require_for(queue)
        except KinetisQueueError as exc:
            if isinstance(queue, DisposableQueue):
                queue.dispose()
            raise CommandError(str(exc)) from exc
        worker = Worker(
            queue,
            connection=settings.name,
            default_max_attempts=tries,
            retry_base_delay=backoff,
            job_timeout=job_timeout,
            reporter=self._job_line if verbosity >= 1 else None,
            concurrency=concurrency,
            prefetch=options["prefetch"],
            hooks=_worker_hooks(settings.name, queues, concurrency, heartbeat),
        )
        self._deferred = 0
        self._counting = threading.Lock()
        handler = self._attach_log_handler(verbosity)
        watcher = self._watch(worker, verbosity) if options["reload"] else None
        scheduler = _start_scheduler(schedules)
        relay = None if options["no_relay"] or options["once"] else _start_relay(queue, settings)
        try:
            if verbosity >= 1:
                self._say(
                    f"Worker on connection {settings.name!r} ({settings.backend}) watching "
                    f"{', '.join(queues)}; stop with Ctrl-C or SIGTERM."
                )
                if relay is not None and settings.outbox is not None:
                    self._say(
                        f"Relaying the outbox of connection {settings.name!r} (database {settings.outbox.database!r}) "
                        "here too; --no-relay leaves it to others."
                    )
                if scheduler is not None:
                    self._say(
                        f"Firing {len(schedules)} schedule(s) here too: {', '.join(s.name for s in schedules)} "
                        "(each tick once across every scheduler; --no-schedule leaves them to others)."
                    )
                for note in _unknown_queue_notes(queue, settings.name, queues, given=options["queue"] is not None):
                    self.stderr.write(note)
                for note in _paused_notes(settings.name, queues):
                    self.stderr.write(note)
                if (
                    job_timeout is not None
                    and isinstance(queue, RenewableQueue)
                    and job_timeout >= queue.visibility_timeout()
                ):
                    self.stderr.write(
                        f"Warning: --timeout {job_timeout:g}s is not below the visibility timeout "
                        f"({queue.visibility_timeout()}s): a job whose heartbeat stalls can be "
                        "redelivered while it still runs."
                    )
            try:
                reason = worker.run(
                    timeout,
                    queues,
                    stop_when_empty=options["stop_when_empty"],
                    once=options["once"],
                    max_jobs=options["max_jobs"],
                    max_time=options["max_time"],
                    memory=options["memory"],
                    restart=marker_for(queue, settings.name),
                    weights=weights or None,
                    slots=slots or None,
                )
            except Exception as exc:
                # An infrastructure failure: non-zero exit; --traceback shows where.
                raise CommandError(
                    f"Worker stopped (error) after {self._tally(worker)}: {type(exc).__name__}: {exc}"
                ) from exc
            if watcher is not None and watcher.changed is not None:
                if verbosity >= 1:
                    self._say(f"Worker stopped to reload after {self._tally(worker)}.")
                raise SystemExit(_reload.RESTART)  # after the finally below: the parent starts a fresh worker
            if verbosity >= 1:
                paused = _paused_among(settings.name, queues)
                self._say(f"Worker stopped ({_why(reason, queues, paused)}) after {self._tally(worker)}.")
                if reason is ExitReason.EMPTY and options["stop_when_empty"]:
                    self._say(_left_behind(queue, queues, paused or ()))
        finally:
            if watcher is not None:
                watcher.stop()
            if relay is not None:
                relay.stop()
            if scheduler is not None:
                scheduler.stop()
                connections.queues.dispose_all()  # the connections the scheduler pushed through
            worker.close()
            if isinstance(queue, DisposableQueue):
                queue.dispose()
            if handler is not None:
                logging.getLogger("kinetis_queue").removeHandler(handler)
                logging.getLogger(JOB_LOGGER).setLevel(logging.NOTSET)

    def _watch(self, worker: Worker, verbosity: int) -> _reload.Watcher:
        """--reload, in the child: Django's reloader in a thread; a change stops ``worker`` after its job."""

        def changed(path: str) -> None:
            if verbosity >= 1:
                self._say(f"{path} changed: the worker stops after its running job, then starts again.")
            worker.stop()

        watcher = _reload.Watcher(changed)
        watcher.start()
        if verbosity >= 1:

            def announce() -> None:
                if watcher.watching.wait(timeout=600):
                    self._say(f"Watching for file changes with {type(watcher.reloader).__name__}.")

            threading.Thread(target=announce, name="kinetis-queue-reload-note", daemon=True).start()
        return watcher

    def _supervise(self, processes: int, verbosity: int) -> None:

        def say(line: str) -> None:
            if verbosity >= 1:
                self._say(line)

        try:
            status = supervise(sys.argv, processes, say)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if status != 0:
            raise CommandError("a worker process ended with a non-zero status", returncode=status)

    def _tally(self, worker: Worker) -> str:
        """What the exit line says the worker did: its jobs, and apart, the deliveries it gave back unstarted."""
        deferred = self._deferred
        line = f"{worker.processed - deferred} job(s)"
        if deferred:
            line += f" and {deferred} deferral(s) (deliveries given back unstarted, no attempt charged)"
        return line

    def _job_line(self, report: JobReport) -> None:
        """One line per job: time, class, queue, attempt, duration, outcome (never arguments)."""
        if report.outcome is JobOutcome.DEFERRED:
            with self._counting:  # the pool's threads report too
                self._deferred += 1
        when = datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        detail = ""
        if report.error is not None:
            detail = f" ({report.error}" + (f", retry in {report.delay:g}s)" if report.delay is not None else ")")
        elif report.outcome in (JobOutcome.SNOOZED, JobOutcome.DEFERRED) and report.delay is not None:
            detail = f" (back in {report.delay:g}s)"
        style = {
            JobOutcome.SUCCEEDED: self.style.SUCCESS,
            JobOutcome.RELEASED: self.style.WARNING,
            JobOutcome.SNOOZED: self.style.WARNING,
            JobOutcome.LOST: self.style.WARNING,
            JobOutcome.SKIPPED: self.style.NOTICE,
            JobOutcome.DEFERRED: self.style.NOTICE,
            JobOutcome.FAILED: self.style.ERROR,
        }[report.outcome]
        self._say(
            f"[{when}] {printable(report.name or report.job_class)} on {report.queue}, attempt {report.attempt}: "
            f"{report.outcome} in {report.duration:.3f}s{detail}",
            style,
        )

    def _say(self, line: str, style: Callable[[str], str] | None = None) -> None:
        """Write one line (in the outcome's colour on a terminal) and flush it: a log collector reading a
        pipe sees each line as it happens."""
        self.stdout.write(line, style)
        self.stdout.flush()

    def _attach_log_handler(self, verbosity: int) -> logging.Handler | None:
        """Show the worker's log lines on stderr unless the project configured logging for them."""
        package_logger = logging.getLogger("kinetis_queue")
        if verbosity < 1 or package_logger.handlers:
            return None
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(PlainFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        package_logger.addHandler(handler)
        level = LOG_LEVELS.get(min(verbosity, 3), logging.WARNING)
        package_logger.setLevel(level)
        logging.getLogger(JOB_LOGGER).setLevel(min(level, logging.INFO))  # a job's own INFO lines show at -v 1
        return handler


#: Set for the children of a --processes supervisor that serves their metrics itself.
METRICS_CHILD = "KINETIS_QUEUE_METRICS_CHILD"


def _serve_metrics(port: int | None, processes: int) -> None:
    """``--metrics-port``: this process serves its metrics (or, supervising children, their sum)."""
    if port is None or os.environ.get(METRICS_CHILD) == "1":
        return
    if not conf.load().metrics:
        raise CommandError("--metrics-port needs KINETIS_QUEUE['METRICS'] = True")

    missing = missing_libraries(conf.load())
    if missing:
        raise CommandError(missing[0])
    if processes > 1:
        import tempfile

        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="kinetis-queue-metrics-")
        os.environ[METRICS_CHILD] = "1"

    try:
        start_server(port)
    except OSError as exc:
        raise CommandError(f"--metrics-port {port}: {exc}") from exc


def _worker_hooks(
    connection: str, queues: tuple[str, ...], concurrency: int, heartbeat: DeliveryHooks | None = None
) -> DeliveryHooks:
    """The app's hooks of every worker, this process's entry in the worker registry (queue_workers), and its
    heartbeat file when it has one (--heartbeat-file)."""

    hooks = [worker_hooks(), WorkerRegistry(connection, queues, concurrency)]
    return HookChain(hooks if heartbeat is None else [*hooks, heartbeat])


def _heartbeat_file(path: Path | None, poll_wait: float) -> DeliveryHooks | None:
    """``--heartbeat-file``: the hook that keeps it fresh, once the file is known to be writable."""
    if path is None:
        return None

    try:
        touch(path)
    except OSError as exc:
        raise CommandError(f"--heartbeat-file {path}: cannot write it: {exc.strerror or type(exc).__name__}") from exc
    return HeartbeatFile(path, poll_wait)


def _declared_schedules() -> list[Schedule]:
    """The schedules this worker fires (every declared one), validated before the worker starts: a
    declaration that ``manage.py check`` reports (E006) stops it, as it stops ``queue_schedule``."""

    try:
        return declaration.load()
    except KinetisQueueError as exc:
        raise CommandError(f"the worker cannot start: {exc} (or start it with --no-schedule)") from exc


def _start_scheduler(schedules: list[Schedule]) -> BackgroundLoop | None:
    """A scheduler thread beside the worker when there is anything to fire (kinetis_queue.worker.background).

    A thread, not a step of the reserving loop: the loop waits natively for the next job (BLMOVE, LISTEN,
    a long poll, a consumer) for up to the poll timeout, and cutting those waits short at every tick would
    cost every worker wake-ups; the thread sleeps until the next tick (at most scheduler.MAX_WAIT).
    """
    if not schedules:
        return None

    scheduler = BackgroundLoop("scheduler", Scheduler(schedules).fire_due)
    scheduler.start()
    return scheduler


def _start_relay(queue: Queue, settings: conf.ConnectionSettings) -> BackgroundLoop | None:
    """The outbox relay beside the worker, when its connection has one (kinetis_queue/outbox/relay.py)."""
    if settings.outbox is None:
        return None

    relay = Relay(queue, settings.outbox)
    loop = BackgroundLoop("outbox relay", relay.step, on_stop=relay.close)
    loop.start()
    return loop


def _unknown_queue_notes(queue: Queue, connection: str, watched: tuple[str, ...], *, given: bool = True) -> list[str]:
    """A note per watched queue the store does not know and no failed job names: a likely typo of --queue
    (``given``), else a reminder that the worker watches 'default' alone.

    What "known" means is the store's (Queue.queue_known): SQL and Redis, holding a job now; SQS,
    the queue exists; RabbitMQ, it is declared. A store that cannot tell gets no note.
    """

    try:
        failed = {q for (c, q) in failed_counts(conf.load().default_connection) if c == connection}
        unknown = [name for name in watched if name not in failed and queue.queue_known(name) is False]
        if not unknown:
            return []
        known = sorted(failed | set(queue.queue_names() or ()))
    except Exception as exc:
        return [f"Note: could not check whether the watched queues exist ({type(exc).__name__})."]
    listed = f"known queues: {', '.join(known)}" if known else "no queue is known on it"
    if not given:
        return [
            f"Note: no --queue given, so this worker watches queue {name!r} alone; nothing was ever pushed to it "
            f"on connection {connection!r} as far as the {queue.backend_name} backend can tell ({listed})."
            for name in unknown
        ]
    return [
        f"Note: nothing was ever pushed to queue {name!r} on connection {connection!r} as far as the "
        f"{queue.backend_name} backend can tell ({listed}); a typo in --queue? Watching it anyway."
        for name in unknown
    ]


def _paused_among(connection: str, watched: tuple[str, ...]) -> tuple[str, ...] | None:
    """The watched queues paused on the connection now (queue_pause), in watch order; None when unreadable."""

    try:
        paused = set(paused_queues(connection))
    except Exception:
        return None
    return tuple(name for name in watched if name in paused)


def _paused_notes(connection: str, watched: tuple[str, ...]) -> list[str]:
    """A note per watched queue that is paused as the worker starts: it takes none of its jobs until resumed."""
    return [
        f"Note: queue {name!r} is paused on connection {connection!r}: this worker takes none of its jobs "
        f"until it is resumed (queue_resume {name} --connection {connection})."
        for name in _paused_among(connection, watched) or ()
    ]


def _why(reason: ExitReason, watched: tuple[str, ...], paused: tuple[str, ...] | None) -> str:
    """The exit line's reason: "empty" is not what stopped a worker whose queues are paused."""
    if reason is not ExitReason.EMPTY or not paused:
        return str(reason)
    if len(paused) == len(watched):
        return f"nothing to take: {', '.join(paused)} paused"
    return f"empty; paused, not taken: {', '.join(paused)}"


def _left_behind(queue: Queue, watched: tuple[str, ...], paused: tuple[str, ...] = ()) -> str:
    """``--stop-when-empty``'s last line: the jobs it did not wait for (delayed, retrying, reserved elsewhere,
    or ready in a paused queue), or that there are none."""
    try:
        stats = {name: queue.stats(name) for name in watched}
    except Exception as exc:
        return f"Left behind: unknown (the queue figures could not be read: {type(exc).__name__})."
    delayed = [s.delayed for s in stats.values()]
    if None in delayed:
        return f"Left behind: unknown (the {queue.backend_name} backend cannot count delayed jobs)."
    parts = []
    waiting = sum(d or 0 for d in delayed)
    if waiting:
        parts.append(f"{waiting} delayed or retrying job(s)")
    reserved = sum(s.reserved or 0 for s in stats.values())
    if reserved:
        held = "taken by a worker, or waiting out a retry delay" if queue.backend_name == "sqs" else "taken by a worker"
        parts.append(f"{reserved} reserved ({held})")
    held_back = sum(stats[name].ready or 0 for name in paused)
    if held_back:
        parts.append(f"{held_back} ready in paused queue(s) {', '.join(paused)}")
    approximate = " (approximate)" if any(s.approximate for s in stats.values()) else ""
    if not parts:
        return f"Nothing left behind: no delayed, retrying or reserved job{approximate}."
    return f"Left behind: {' and '.join(parts)}{approximate}; --stop-when-empty does not wait for them."
