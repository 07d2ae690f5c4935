"""The conformance suite's parametrization table: one row per backend, traits quoting the spec.

A new backend adds one row here (and its connection in tests/settings.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backend:
    #: The test id: [sync], [sql-sqlite], ...
    id: str
    #: The KINETIS_QUEUE connection in tests/settings.py.
    connection: str
    #: The service a test of this backend needs ("" for none), named when it is down.
    service: str = ""
    #: False for sync: push() runs the job inline and nothing is stored.
    stores_jobs: bool = True
    #: Spec table "Fenced settlements": Redis and SQL only.
    fenced: bool = True
    #: False for SQS: "visibility timeout is best-effort".
    atomic_reserve: bool = True
    #: "timeout" (Redis, SQL, SQS) or "connection" (RabbitMQ: redelivered when the channel drops).
    recovers_by: str = "timeout"
    #: The Django database alias of an SQL backend.
    database: str | None = None
    #: Spec "Waiting counts": a job held by a delayed release() counts in size(). False for SQS, where that
    #: delay is a visibility timeout (the message is in flight) and size() leaves in-flight messages out.
    counts_delayed_release: bool = True
    #: Spec "The pop() priority/timeout contract": between empty sweeps Redis, SQL and RabbitMQ pause for up
    #: to a second, cut to the deadline. False for SQS, whose wait is a long poll of the highest-priority
    #: queue alone: it returns a job the moment one arrives there, lasts up to 5 s, and waits whole
    #: seconds, so a pop() can outlast its deadline (and a 1 s visibility timeout) by up to a second.
    pauses_between_sweeps: bool = True
    #: A fixture the `connection` fixture requests before building the queue (to start the backend's
    #: server, say). Its value's ``prepare(queue)`` runs on the built queue, and tests/support/helpers.py's
    #: ``rewrite_stored_job`` calls its ``rewrite_stored_job(job_id, job_class, args)``.
    setup: str | None = None
    #: Spec "Waiting counts": a delayed push counts in size() until it is due. False for SQS FIFO, whose
    #: delay is emulated: a worker that meets the message early hides it (in flight) for the rest of its
    #: delay, and size() leaves in-flight messages out; before that, SQS counts it as ready, not delayed
    #: (stats(), queue_status). docs/backends/sqs.md, "FIFO queues".
    counts_delayed_push: bool = True
    #: The longest queue name the row takes: the contract's 80, less the ".fifo" suffix on SQS FIFO.
    longest_queue_name: int = 80
    #: Issue 20: False for a row of another configuration of a store the fault tier covers in full already
    #: (rabbitmq-quorum, sqs-fifo): of the fault tier it runs the kill storm only, to keep `make test`
    #: within its time budget (tests/faults/conftest.py). The conformance suite runs on it whole.
    full_fault_tier: bool = True
    #: Issue 19, docs/priority.md: the store orders jobs within a queue by priority (SQL: an indexed
    #: column; Redis: a sorted set). False for SQS and RabbitMQ, which refuse a priority other than 0.
    orders_by_priority: bool = False
    #: The fault tier (tests/faults/) runs on this row; False for a row only the conformance suite and named
    #: fault scenarios cover (tests/conftest.py deselects the rest).
    fault_tier: bool = True
    #: Behind a transaction pooler (PgBouncer, docs/backends/pgbouncer.md): the client's sessions are not the
    #: server's, so a fault aimed at the worker's server sessions (pg_terminate_backend by application_name)
    #: lands on whichever clients the pool lends them to, the test's own included.
    pooled: bool = False

    @property
    def refuses_priority(self) -> bool:
        """A store of jobs that cannot order them by priority: a push with one is refused (docs/priority.md)."""
        return self.stores_jobs and not self.orders_by_priority

    @property
    def recovers_by_timeout(self) -> bool:
        """Spec "Reservation and recovery": an unsettled delivery comes back once its reservation expires
        (not on RabbitMQ, where it comes back when the connection holding it drops)."""
        return self.recovers_by == "timeout"


BACKENDS = [
    Backend("sync", "sync", stores_jobs=False, fenced=False, atomic_reserve=False, recovers_by="none"),
    Backend("sql-sqlite", "sqlite", database="default", orders_by_priority=True),
    Backend(
        "sql-postgres", "postgres", service="PostgreSQL at 127.0.0.1:5432", database="postgres", orders_by_priority=True
    ),
    # The same PostgreSQL through PgBouncer in transaction pooling (tests/support/pgbouncer.py, started by the
    # pgbouncer_row fixture): no session state, so no LISTEN (the worker polls), no prepared push.
    Backend(
        "sql-pgbouncer",
        "pgbouncer",
        service="PgBouncer (started by the tests) before PostgreSQL at 127.0.0.1:5432",
        database="pgbouncer",
        orders_by_priority=True,
        setup="pgbouncer_row",
        pooled=True,
    ),
    Backend("sql-mariadb", "mariadb", service="MariaDB at 127.0.0.1:3306", database="mariadb", orders_by_priority=True),
    # Spec: leases expire by Redis TIME (recovered by timeout); settlements fenced on the leased envelope.
    Backend("redis", "redis", service="Redis at 127.0.0.1:6379", orders_by_priority=True),
    # Issue 20, docs/backends/redis.md: the same on a local Redis Cluster (three masters, three replicas) the
    # redis_cluster fixture starts, pushes waiting for one replica (WAIT_REPLICAS). The fault tier's own
    # scenario for it is tests/faults/test_redis_failover.py.
    Backend(
        "redis-cluster",
        "rediscluster",
        service="a local Redis Cluster (started by the tests)",
        orders_by_priority=True,
        setup="redis_cluster_row",
        fault_tier=False,
    ),
    # Spec, SQS: no fence (SQS answers a stale receipt handle itself), a best-effort visibility timeout,
    # not a ClearableQueue. The sqs_queues fixture starts moto's server and creates each test's queues.
    Backend(
        "sqs",
        "sqs",
        service="moto's server (started by the tests)",
        fenced=False,
        atomic_reserve=False,
        counts_delayed_release=False,
        pauses_between_sweeps=False,
        setup="sqs_queues",
    ),
    # Issue 20: FIFO queues (FIFO True: SQS names end in .fifo), the same fixture creating them as FIFO queues.
    Backend(
        "sqs-fifo",
        "sqsfifo",
        service="moto's server (started by the tests)",
        fenced=False,
        atomic_reserve=False,
        counts_delayed_release=False,
        counts_delayed_push=False,
        longest_queue_name=75,
        full_fault_tier=False,
        pauses_between_sweeps=False,
        setup="sqs_queues",
    ),
    # Spec, RabbitMQ: no fence (a delivery tag is scoped to its channel), not renewable, and an unsettled
    # delivery is requeued when its connection drops. rabbitmq_queues deletes each test's queues and ladders.
    Backend(
        "rabbitmq",
        "rabbitmq",
        service="RabbitMQ at 127.0.0.1:5672",
        fenced=False,
        recovers_by="connection",
        setup="rabbitmq_queues",
    ),
    # Issue 20: the same broker with quorum queues (QUEUE_TYPE "quorum"), the ladder's tiers quorum too.
    Backend(
        "rabbitmq-quorum",
        "rabbitmqquorum",
        service="RabbitMQ at 127.0.0.1:5672",
        fenced=False,
        recovers_by="connection",
        setup="rabbitmq_queues",
        full_fault_tier=False,
    ),
]

#: Issue 20: rows of another configuration of a store that already has its row. Of the suite they run the
#: conformance suite and the kill storm (tests/conftest.py deselects the rest): the store's other tests already
#: run on its first row, and the row's own mechanism has its specific tests (tests/specific). Issue 28 brought
#: them back into `make test`.
EXTENDED_ROWS = frozenset({"sqs-fifo", "rabbitmq-quorum", "redis-cluster", "sql-pgbouncer"})
#: Every row (a test of one row's own mechanism takes it from here).
ALL_BACKENDS = BACKENDS

#: The SQL rows a test of the SQL store's own mechanisms runs on (not the pooled row: test_sql_pgbouncer.py).
SQL_BACKENDS = [b for b in BACKENDS if b.database is not None and b.id not in EXTENDED_ROWS]
