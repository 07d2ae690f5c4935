"""``python -m bench.rabbitmq``: the RabbitMQ backend against bare py-amqp, push/s and drain jobs/s.

Each repeat pushes N no-op jobs on both sides and drains them with one worker process per side:

- push: ``queues["rabbitmq"].push(Noop(), queue=q)`` N times in this process, against N bare
  py-amqp publishes of a message of the same shape (a JSON body with a fresh 32-hex id and time,
  the same two headers), each persistent, ``mandatory`` and waiting for its publisher confirm, as
  the project's are. The two sides alternate in blocks of PUSH_BLOCK jobs on connections opened
  before the clock starts, so a load burst on this shared machine hits both alike;
- drain: one fresh process drains both queues, alternating blocks of DRAIN_BLOCK jobs: a real
  ``Worker``'s ``process_next()`` calls (basic.get, decode, handle(), ack, signals) against the
  bare at-least-once loop, ``basic.get`` + ``basic.ack`` per job. Each side's time includes
  opening its connection, and which side goes first alternates from block to block. The broker's
  speed drifts by a factor of two or more within seconds on this machine (its persistent message
  store), so drains in separate processes one after the other measured the drift more than the
  client: alternating blocks give both sides the same broker.

Speed claims are ratios against the bare loop measured in the same run: with confirms, a
persistent publish costs a broker round trip plus the broker's write, so absolute rates depend on
this machine's disk and load, the ratios much less. Each phase is checked (N messages ready on each
side after a push, none after the drains), and the run aborts otherwise. Medians of ``--repeat``
runs are printed with PASS/FAIL against the issue's targets (push and drain >= 70 % of bare); the
exit code is 0 either way: this is a measurement.

Django is configured here (``settings.configure``), in this process and in the drain children,
with one rabbitmq connection. The two bench queues are named after this process's id, and are
deleted (the project's with its delay ladder) at the start and the end of the run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import log as _log
from bench.common import positive_int as _positive_int

REPO_ROOT = Path(__file__).resolve().parent.parent
CONNECTION = "rabbitmq"
#: Push and drain blocks: the two sides alternate every PUSH_BLOCK / DRAIN_BLOCK jobs.
PUSH_BLOCK = 250
DRAIN_BLOCK = 250
#: The issue's targets: project rate / bare rate, measured in the same run.
TARGETS = {"push": 0.70, "drain": 0.70}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.rabbitmq",
        description="RabbitMqQueue vs bare py-amqp (confirmed persistent publish; basic.get + ack): push/s, drain/s.",
    )
    parser.add_argument("--n", type=_positive_int, default=5000, help="jobs per push and per drain (default 5000)")
    parser.add_argument("--repeat", type=_positive_int, default=3, help="runs; the median is reported (default 3)")
    parser.add_argument(
        "--url", default="amqp://guest:guest@127.0.0.1:5672//", help="the broker (default: %(default)s)"
    )
    parser.add_argument("--queue", default=f"bench-{os.getpid()}", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--drain", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def configure(url: str) -> None:
    """Django settings for the bench: the bench app (its Noop job) and one rabbitmq connection."""
    from django.conf import settings

    settings.configure(
        SECRET_KEY="kinetis-queue-bench",
        USE_TZ=True,
        INSTALLED_APPS=["django.contrib.contenttypes", "kinetis_queue", "bench"],
        DATABASES={},
        KINETIS_QUEUE={
            "DEFAULT_CONNECTION": CONNECTION,
            "CONNECTIONS": {CONNECTION: {"BACKEND": "rabbitmq", "URL": url}},
        },
        LOGGING={"version": 1, "disable_existing_loggers": False, "loggers": {"kinetis_queue": {"level": "WARNING"}}},
    )
    import django

    django.setup()


# -- the bare side ------------------------------------------------------------------------------------


def bare_channel(url: str) -> Any:
    """A plain py-amqp channel on the broker named by ``url``, with a return handler registered."""
    import amqp

    from kinetis_queue.backends.rabbitmq.session import parse_url

    params = parse_url(url, "--url")
    connection = amqp.Connection(
        host=f"{params.host}:{params.port}",
        userid=params.userid,
        password=params.password,
        virtual_host=params.virtual_host,
    )
    connection.connect()
    channel = connection.channel()
    channel.events["basic_return"].add(_returned)
    return channel


def _returned(exc: Exception, exchange: str, routing_key: str, message: Any) -> None:
    raise SystemExit(f"bench.rabbitmq: the broker returned a bare message ({exc})")


def bare_message() -> Any:
    """A message shaped like the project's Noop one: a fresh id and time, the same headers and flags."""
    import amqp

    job_id = uuid.uuid4().hex
    body = f'{{"id":"{job_id}","pushedAt":{time.time()!r},"class":"bench.jobs.Noop","args":{{}}}}'.encode()
    return amqp.Message(
        body,
        content_type="application/json",
        delivery_mode=2,
        message_id=job_id,
        application_headers={"maxAttempts": None, "metadata": "{}"},
    )


def interleaved_drain(url: str, queue: str, n: int) -> dict[str, float]:
    """Drain ``n`` jobs from each side in alternating blocks; return both rates (jobs/s)."""
    from kinetis_queue import conf, connections
    from kinetis_queue.contracts import DisposableQueue
    from kinetis_queue.worker import Worker

    settings = conf.connection_settings(CONNECTION)
    built = connections.build(settings.name)
    worker = Worker(
        built,
        connection=CONNECTION,
        default_max_attempts=settings.max_attempts,
        retry_base_delay=settings.retry_base_delay,
    )
    queues, bare = [queue], f"{queue}-bare"
    times = {"project": 0.0, "bare": 0.0}
    channel: Any = None

    def project_block(count: int) -> None:
        started = time.perf_counter()
        target = worker.processed + count
        while worker.processed < target:
            if not worker.process_next(0.5, queues):
                raise SystemExit(f"bench.rabbitmq: the project drain ran dry after {worker.processed} jobs")
        times["project"] += time.perf_counter() - started

    def bare_block(count: int) -> None:
        nonlocal channel
        started = time.perf_counter()
        if channel is None:
            channel = bare_channel(url)
        for _ in range(count):
            message = channel.basic_get(bare, no_ack=False)
            if message is None:
                raise SystemExit("bench.rabbitmq: the bare drain ran dry")
            channel.basic_ack(message.delivery_tag)
        times["bare"] += time.perf_counter() - started

    try:
        for index, offset in enumerate(range(0, n, DRAIN_BLOCK)):
            count = min(DRAIN_BLOCK, n - offset)
            for block in (project_block, bare_block) if index % 2 == 0 else (bare_block, project_block):
                block(count)
    finally:
        worker.close()
        if isinstance(built, DisposableQueue):
            built.dispose()
        if channel is not None:
            channel.connection.close()
    return {"project_drain": n / times["project"], "bare_drain": n / times["bare"]}


# -- the measurements -----------------------------------------------------------------------------------


def _run_child(args: argparse.Namespace) -> dict[str, float]:
    """Drain in a fresh process (``--drain``); return the JSON object it prints last."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    command = [
        sys.executable,
        "-m",
        "bench.rabbitmq",
        "--drain",
        "--n",
        str(args.n),
        "--url",
        args.url,
        "--queue",
        args.queue,
    ]
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bench.rabbitmq: the drain exited with status {done.returncode}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


class Store:
    """The two bench queues on the broker: the project's (``--queue``) and the bare one beside it."""

    def __init__(self, url: str, queue: str) -> None:
        from kinetis_queue import queues

        self.project = queues[CONNECTION]
        self.queue = queue
        self.bare = f"{queue}-bare"
        self.channel = bare_channel(url)

    def reset(self) -> None:
        self.project.delete(self.queue)  # type: ignore[attr-defined]
        self.channel.queue_delete(self.bare)
        self.channel.queue_declare(self.bare, durable=True, auto_delete=False)

    def counts(self) -> dict[str, int]:
        return {
            "project": int(self.channel.queue_declare(self.queue, passive=True).message_count),
            "bare": int(self.channel.queue_declare(self.bare, passive=True).message_count),
        }

    def expect(self, phase: str, ready: int) -> None:
        counts = self.counts()
        if counts != {"project": ready, "bare": ready}:
            raise SystemExit(f"bench.rabbitmq: after the {phase}, the queues hold {counts}, expected {ready} each")

    def close(self) -> None:
        self.project.delete(self.queue)  # type: ignore[attr-defined]
        self.channel.queue_delete(self.bare)
        self.channel.connection.close()


def push_phase(store: Store, n: int, project_first: bool) -> dict[str, float]:
    """Push N jobs on each side, interleaved in blocks of PUSH_BLOCK; return both push/s."""
    from bench.jobs import Noop

    queue, name = store.project, store.queue
    queue.push(Noop(), queue=name)  # opens the project's connection and declares its queue before the clock
    queue.clear(name)
    channel, bare = store.channel, store.bare
    times = {"project": 0.0, "bare": 0.0}

    def project_block(count: int) -> None:
        started = time.perf_counter()
        for _ in range(count):
            queue.push(Noop(), queue=name)
        times["project"] += time.perf_counter() - started

    def bare_block(count: int) -> None:
        started = time.perf_counter()
        for _ in range(count):
            channel.basic_publish_confirm(bare_message(), exchange="", routing_key=bare, mandatory=True)
        times["bare"] += time.perf_counter() - started

    blocks = [project_block, bare_block] if project_first else [bare_block, project_block]
    for offset in range(0, n, PUSH_BLOCK):
        for block in blocks:
            block(min(PUSH_BLOCK, n - offset))
    store.expect("push", n)
    return {"project_push": n / times["project"], "bare_push": n / times["bare"]}


def measure(args: argparse.Namespace, store: Store) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {}
    for run in range(args.repeat):
        store.reset()
        project_first = run % 2 == 0
        result = push_phase(store, args.n, project_first)
        result.update(_run_child(args))
        store.expect("drains", 0)
        for metric, value in result.items():
            samples.setdefault(metric, []).append(value)
        _log(f"  rabbitmq run {run + 1}/{args.repeat}: " + "  ".join(f"{k} {v:,.0f}" for k, v in result.items()))
    return samples


def report(medians: dict[str, float], args: argparse.Namespace) -> list[str]:
    lines = [
        f"kinetis_queue rabbitmq vs bare py-amqp: N={args.n} no-op jobs, median of {args.repeat}, one worker process",
        "",
    ]
    lines.append(f"{'':<14}{'project':>10}{'bare':>10}{'ratio':>8}{'target':>9}")
    for kind, label in (("push", "push/s"), ("drain", "drain jobs/s")):
        ratio, target = medians[f"{kind}_ratio"], TARGETS[kind]
        lines.append(
            f"{label:<14}{medians[f'project_{kind}']:>10,.0f}{medians[f'bare_{kind}']:>10,.0f}{ratio:>8.0%}"
            f"{'>= ' + format(target, '.0%'):>9}  {'PASS' if ratio >= target else 'FAIL'}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure(args.url)
    if args.drain:
        print(json.dumps(interleaved_drain(args.url, args.queue, args.n)))
        return 0

    store = Store(args.url, args.queue)
    _log(f"bench.rabbitmq: N={args.n}, repeat={args.repeat}, queues {args.queue!r} and {store.bare!r}")
    try:
        samples = measure(args, store)
    finally:
        store.close()
    medians = {metric: statistics.median(values) for metric, values in samples.items()}
    medians["push_ratio"] = medians["project_push"] / medians["bare_push"]
    medians["drain_ratio"] = medians["project_drain"] / medians["bare_drain"]
    print()
    for line in report(medians, args):
        print(line)
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {"n": args.n, "repeat": args.repeat, "medians": medians, "samples": samples, "targets": TARGETS},
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
