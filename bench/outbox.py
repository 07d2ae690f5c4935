"""``python -m bench.outbox``: what the transactional outbox costs a push, and how soon the relay delivers it.

For Redis and RabbitMQ, each with its outbox in PostgreSQL and in MariaDB, in one process:

- push: N iterations of ``with atomic(): push(job)`` on the connection without an outbox (the push goes
  straight to the store; the transaction is empty) against the same on the connection with one (the push
  is an INSERT in the transaction, then its commit), alternating in blocks so a load burst hits both;
- latency: with an idle relay thread (NOTIFY on PostgreSQL, OUTBOX_POLL on MariaDB) and a consumer
  blocked in ``pop()``, SAMPLES pushes one at a time: the time from the commit's end to the delivery in
  the consumer (the relay's wake-up, its send, and the store's own wake-up of the pop), p50 and p95.

SQS is left out: its server in this project is moto, a test double whose speed says nothing. The figures
are printed, never asserted.
"""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time
import uuid
from typing import Any

from bench.common import log
from bench.common import positive_int as _positive_int

#: Pushes per block of one side before the other side's block.
BLOCK = 100
#: Pushes the relay latency is measured over.
SAMPLES = 100
STORES = {
    "redis": {"BACKEND": "redis", "URL": "redis://127.0.0.1:6379/13", "PREFIX": "kqbench_outbox:"},
    "rabbitmq": {"BACKEND": "rabbitmq", "URL": "amqp://guest:guest@127.0.0.1:5672//"},
}


def configure(poll: float) -> None:
    from django.conf import settings

    from bench import settings as bench_settings

    bench_settings.create_databases(["postgres", "mariadb"])
    connections: dict[str, Any] = {}
    for store, entry in STORES.items():
        connections[f"{store}direct"] = entry
        connections[f"{store}postgres"] = {**entry, "OUTBOX": "postgres"}
        connections[f"{store}mariadb"] = {**entry, "OUTBOX": "mariadb", "OUTBOX_POLL": poll}
    settings.configure(
        SECRET_KEY="kinetis-queue-bench",
        USE_TZ=True,
        INSTALLED_APPS=["django.contrib.contenttypes", "kinetis_queue", "bench"],
        DATABASES={alias: bench_settings.DATABASES[alias] for alias in ("default", "postgres", "mariadb")},
        KINETIS_QUEUE={"DEFAULT_CONNECTION": "redisdirect", "CONNECTIONS": connections},
        LOGGING={"version": 1, "disable_existing_loggers": False, "loggers": {"kinetis_queue": {"level": "WARNING"}}},
    )
    import django

    django.setup()
    from django.core.management import call_command

    for alias in ("postgres", "mariadb"):
        call_command("migrate", database=alias, verbosity=0, skip_checks=True)


def measure_push(direct: Any, outboxed: Any, database: str, n: int, queue: str) -> dict[str, float]:
    """Pushes/s of ``atomic(): push()`` without and with the outbox, alternating in blocks."""
    from django.db import transaction

    from bench.jobs import Noop

    seconds = {"direct": 0.0, "outbox": 0.0}
    for _ in range(max(1, n // BLOCK)):
        for side, target in (("direct", direct), ("outbox", outboxed)):
            started = time.perf_counter()
            for _job in range(BLOCK):
                with transaction.atomic(using=database):
                    target.push(Noop(), queue=queue)
            seconds[side] += time.perf_counter() - started
    done = max(1, n // BLOCK) * BLOCK
    return {side: done / spent for side, spent in seconds.items()}


def measure_latency(outboxed: Any, database: str, queue: str) -> dict[str, float]:
    """Milliseconds from a push's commit to its delivery by a blocked pop(), with an idle relay (p50, p95)."""
    from django.db import transaction

    from bench.jobs import Noop
    from kinetis_queue.conf import connection_settings
    from kinetis_queue.outbox.relay import Relay
    from kinetis_queue.worker.background import BackgroundLoop

    settings = connection_settings(outboxed.connection)
    assert settings.outbox is not None
    relay = Relay(outboxed, settings.outbox)
    loop = BackgroundLoop("outbox relay", relay.step, on_stop=relay.close)
    loop.start()
    delivered: list[float] = []
    ready = threading.Event()

    def consume() -> None:
        for _ in range(SAMPLES):
            ready.set()
            job = outboxed.pop(10, [queue])
            delivered.append(time.perf_counter())
            if job is not None:
                outboxed.ack(job)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    samples: list[float] = []
    try:
        for index in range(SAMPLES):
            ready.wait(10)
            ready.clear()
            # Let the relay and the consumer go idle again (the latency of an idle pair), at a random point
            # of the relay's poll cycle where it polls (MariaDB), so the cycle is not sampled in phase.
            time.sleep(random.uniform(0.02, 0.06))
            with transaction.atomic(using=database):
                outboxed.push(Noop(), queue=queue)
            committed = time.perf_counter()
            deadline = time.monotonic() + 10
            while len(delivered) <= index and time.monotonic() < deadline:
                time.sleep(0.0002)
            if len(delivered) > index:
                samples.append((delivered[index] - committed) * 1000)
    finally:
        loop.stop()
        consumer.join(15)
    quantiles = statistics.quantiles(samples, n=100) if len(samples) > 1 else samples * 99
    return {"p50": statistics.median(samples), "p95": quantiles[94], "samples": float(len(samples))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=_positive_int, default=2000, help="pushes per side (default 2000)")
    parser.add_argument("--stores", default="redis,rabbitmq")
    parser.add_argument(
        "--poll", type=float, default=0.02, help="OUTBOX_POLL of the MariaDB outboxes (default 0.02, the default)"
    )
    options = parser.parse_args()
    configure(options.poll)
    from kinetis_queue import connections

    rows = []
    for store in options.stores.split(","):
        direct = connections.build(f"{store}direct")
        for database in ("postgres", "mariadb"):
            outboxed = connections.build(f"{store}{database}")
            queue = "ob" + uuid.uuid4().hex[:12]
            log(f"{store} + {database} outbox: push ...")
            push = measure_push(direct, outboxed, database, options.n, queue)
            _settle_backlog(outboxed)
            direct.clear(queue)  # what the push phase stored, so the latency phase pops only its own
            log(f"{store} + {database} outbox: latency ...")
            latency = measure_latency(outboxed, database, queue)
            rows.append((store, database, push, latency))
            _clean(outboxed, queue)
            dispose = getattr(outboxed, "dispose", None)
            if dispose is not None:
                dispose()
        dispose = getattr(direct, "dispose", None)
        if dispose is not None:
            dispose()
    print(
        "\n| store | outbox in | direct push/s (in atomic) | outbox push/s | outbox / direct "
        "| commit to delivery p50 / p95 |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for store, database, push, latency in rows:
        print(
            f"| {store} | {database} | {push['direct']:,.0f} | {push['outbox']:,.0f} | "
            f"{push['outbox'] / push['direct']:.2f} | {latency['p50']:.1f} / {latency['p95']:.1f} ms "
            f"({latency['samples']:.0f} samples) |"
        )
    return 0


def _settle_backlog(outboxed: Any) -> None:
    """Relay what the push phase left in the outbox (no relay ran then)."""
    from kinetis_queue.conf import connection_settings
    from kinetis_queue.outbox.relay import Relay

    settings = connection_settings(outboxed.connection)
    assert settings.outbox is not None
    relay = Relay(outboxed, settings.outbox)
    while relay.relay_once():
        pass


def _clean(queue: Any, name: str) -> None:
    """Drop what the run left: its queue (and, on RabbitMQ, the queue's declaration)."""
    if hasattr(queue, "delete"):
        queue.delete(name)
    elif hasattr(queue, "clear"):
        queue.clear(name)


if __name__ == "__main__":
    raise SystemExit(main())
