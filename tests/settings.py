"""Settings for the test suite: one Django project with a database alias per SQL backend.

Test databases are created by pytest-django. A worker started as a subprocess by a test gets
KINETIS_TESTS_SUBPROCESS=1 and then points each alias straight at the test database.
"""

from __future__ import annotations

import os
import tempfile
from importlib.util import find_spec
from pathlib import Path

SUBPROCESS = os.environ.get("KINETIS_TESTS_SUBPROCESS") == "1"
#: Test databases are named per run, so two runs on one machine never drop each other's; worker
#: subprocesses inherit the variable and so find the same databases.
#: Under pytest-xdist each worker process (gw0, gw1, ...) gets databases of its own.
RUN_ID = os.environ.setdefault("KINETIS_TESTS_RUN_ID", str(os.getpid())) + os.environ.get("PYTEST_XDIST_WORKER", "")
SQLITE_TEST_FILE = str(Path(tempfile.gettempdir()) / f"kinetis_queue_test_{RUN_ID}.sqlite3")
PG_TEST_NAME = f"test_kinetis_queue_{RUN_ID}"
MARIADB_TEST_NAME = f"test_kinetis_queue_{RUN_ID}"
REDIS_URL = "redis://127.0.0.1:6379/0"
REDIS_PREFIX = f"kinetis_test_{RUN_ID}:"
#: moto's SQS server: tests/support/fixtures.py's moto_server fixture starts it and sets this variable, which worker
#: subprocesses inherit (in the test process the fixture overrides the setting). Nothing listens at the
#: fallback, so a stray SQS call fails instead of reaching AWS.
SQS_ENDPOINT = os.environ.get("KINETIS_TESTS_SQS_ENDPOINT", "http://127.0.0.1:9")
#: A local Redis Cluster's start nodes (comma-separated), set by tests/support/fixtures.py's redis_cluster fixture
#: (worker subprocesses inherit it); nothing listens at the fallback.
REDIS_CLUSTER_NODES = os.environ.get("KINETIS_TESTS_REDIS_CLUSTER", "redis://127.0.0.1:9").split(",")
#: A local Sentinel set's sentinels (comma-separated), set by the redis_sentinels fixture.
REDIS_SENTINELS = os.environ.get("KINETIS_TESTS_REDIS_SENTINELS", "redis://127.0.0.1:9").split(",")
RABBITMQ_URL = "amqp://guest:guest@127.0.0.1:5672//"
#: PgBouncer in front of the PostgreSQL test database, in transaction pooling (tests/support/pgbouncer.py): the
#: session fixture starts it on a free port and sets this variable, which worker subprocesses inherit. Nothing
#: listens at the fallback, so a test that reaches the alias without the fixture fails at once.
PGBOUNCER_PORT = os.environ.get("KINETIS_TESTS_PGBOUNCER_PORT", "9")

SECRET_KEY = "kinetis-queue-tests"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # The admin's CSS and JS, served to the browser tests (tests/operator/browser) by their live server.
    "django.contrib.staticfiles",
    "kinetis_queue",
    "tests",
]

# The admin (tests/operator/test_admin.py): sessions, auth, messages and CSRF, as a project would have them.
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
ROOT_URLCONF = "tests.urls"
STATIC_URL = "/static/"
# Every backend is configured below, but the Django 5.2 venv (make test's core stage) installs no
# client library for Redis, SQS or RabbitMQ: that would stop every management command a test starts.
# tests/operator/test_checks.py still sees the check (run_checks() ignores silencing).
SILENCED_SYSTEM_CHECKS = ["kinetis_queue.E002"]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": SQLITE_TEST_FILE if SUBPROCESS else str(Path(tempfile.gettempdir()) / "kinetis_queue.sqlite3"),
        "TEST": {"NAME": SQLITE_TEST_FILE},
        "OPTIONS": {"timeout": 20},
    },
    "postgres": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": PG_TEST_NAME if SUBPROCESS else "test",
        "USER": "postgres",
        "HOST": "127.0.0.1",
        "PORT": "5432",
        "TEST": {"NAME": PG_TEST_NAME},
    },
    # The PostgreSQL test database again, through PgBouncer (pool_mode = transaction). A test mirror: no database
    # of its own is created (PgBouncer is not running yet when the test databases are), the NAME is postgres's.
    # DISABLE_SERVER_SIDE_CURSORS is Django's setting for transaction pooling; the SQL backend reads it as
    # "no session state" too (kinetis_queue/backends/sql/pooling.py).
    "pgbouncer": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": PG_TEST_NAME if SUBPROCESS else "test",
        "USER": "postgres",
        "HOST": "127.0.0.1",
        "PORT": PGBOUNCER_PORT,
        "DISABLE_SERVER_SIDE_CURSORS": True,
        "TEST": {"MIRROR": "postgres"},
    },
    "mariadb": {
        "ENGINE": "django.db.backends.mysql",
        "NAME": MARIADB_TEST_NAME if SUBPROCESS else "test",
        "USER": "root",
        "HOST": "127.0.0.1",
        "PORT": "3306",
        "OPTIONS": {"charset": "utf8mb4"},
        "TEST": {"NAME": MARIADB_TEST_NAME, "CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"},
    },
}

_REDIS = {"BACKEND": "redis", "URL": REDIS_URL, "PREFIX": REDIS_PREFIX, "VISIBILITY_TIMEOUT": 1}
#: Redis Cluster (docs/backends/redis.md): pushes wait for their master's replica, so a failover loses none.
_REDIS_CLUSTER = {
    "BACKEND": "redis",
    "CLUSTER_NODES": REDIS_CLUSTER_NODES,
    "PREFIX": REDIS_PREFIX,
    "VISIBILITY_TIMEOUT": 1,
    "WAIT_REPLICAS": 1,
}
_SQS = {"BACKEND": "sqs", "REGION": "us-east-1", "ENDPOINT_URL": SQS_ENDPOINT, "VISIBILITY_TIMEOUT": 1}
_RABBITMQ = {"BACKEND": "rabbitmq", "URL": RABBITMQ_URL, "SLOT_LEASE": 2}

KINETIS_QUEUE = {
    "DEFAULT_CONNECTION": "sqlite",
    "CONNECTIONS": {
        "sync": {"BACKEND": "sync"},
        "sqlite": {"BACKEND": "sql", "DATABASE": "default", "VISIBILITY_TIMEOUT": 1},
        "postgres": {"BACKEND": "sql", "DATABASE": "postgres", "VISIBILITY_TIMEOUT": 1},
        "mariadb": {"BACKEND": "sql", "DATABASE": "mariadb", "VISIBILITY_TIMEOUT": 1},
        "pgbouncer": {"BACKEND": "sql", "DATABASE": "pgbouncer", "VISIBILITY_TIMEOUT": 1},
        # A per-run key prefix (worker subprocesses inherit the run id), and per-test queue names.
        "redis": _REDIS,
        "rediscluster": _REDIS_CLUSTER,
        "redissentinel": {
            "BACKEND": "redis",
            "SENTINELS": REDIS_SENTINELS,
            "SENTINEL_SERVICE": "kqmaster",
            "PREFIX": REDIS_PREFIX,
            "VISIBILITY_TIMEOUT": 1,
            "WAIT_REPLICAS": 1,
        },
        # Queues are created per test (queue names are unique), so no prefix is needed.
        "sqs": _SQS,
        # FIFO queues (names ending in .fifo; docs/backends/sqs.md), each message its own group.
        "sqsfifo": {**_SQS, "FIFO": True},
        # The machine's shared broker: queue names are unique per test, and each test deletes what it declared.
        "rabbitmq": _RABBITMQ,
        # Quorum work queues and ladder tiers (docs/backends/rabbitmq.md), on the same single-node broker.
        "rabbitmqquorum": {**_RABBITMQ, "QUEUE_TYPE": "quorum"},
        # The transactional outbox (kinetis_queue/outbox): each store with its outbox in PostgreSQL, and in MariaDB.
        "redisoutbox": {**_REDIS, "OUTBOX": "postgres"},
        "sqsoutbox": {**_SQS, "OUTBOX": "postgres"},
        "rabbitoutbox": {**_RABBITMQ, "OUTBOX": "postgres"},
        "redismaria": {**_REDIS, "OUTBOX": "mariadb"},
        "sqsmaria": {**_SQS, "OUTBOX": "mariadb"},
        "rabbitmaria": {**_RABBITMQ, "OUTBOX": "mariadb"},
        "redislite": {**_REDIS, "OUTBOX": "default"},
        # The outbox in PostgreSQL through PgBouncer (tests/specific/test_sql_pgbouncer.py): the relay polls.
        "redisbouncer": {**_REDIS, "OUTBOX": "pgbouncer"},
    },
    "POLL_TIMEOUT": 1,
    # Off for the suite (every push and worker would write minute rows beside the tests' own writes);
    # tests/integrations/test_history.py switches it on.
    "HISTORY": False,
    # A worker subprocess with Prometheus metrics (tests/integrations/test_observability.py).
    "METRICS": os.environ.get("KINETIS_TESTS_METRICS") == "1",
    # Test modules a worker subprocess must know besides tests/jobs.py (discovered): a worker imports
    # nothing a payload names (kinetis_queue/payload/registry.py). task_defs needs django.tasks (or the backport).
    "IMPORTS": [
        "tests.faults.jobs",
        "tests.hostile_jobs",
        "tests.operator_jobs",
        "tests.operator_receivers",
        # Test modules whose Job classes the tests push: push() accepts only classes a worker imports at
        # start-up. Classes push must refuse live in tests.unpushable_jobs, which is not listed here.
        "tests.concurrency_jobs",
        "tests.conformance.test_job_values",
        "tests.conformance.test_push",
        "tests.conformance.test_resolution",
        "tests.core.test_dispatcher_edges",
        "tests.core.test_job_edges",
        "tests.core.test_job_timeout_edges",
        "tests.core.test_worker_edges",
        "tests.core.test_worker_parts",
        "tests.faults.fuzz_jobs",
        "tests.operator.test_worker_command_lines",
        *(["tests.task_defs"] if any(find_spec(name) for name in ("django.tasks", "django_tasks")) else []),
        # @task(**options) needs Django 6.1's task_class forwarding (tests/task_option_defs.py).
        *(["tests.task_option_defs"] if find_spec("django.tasks") else []),
        "kinetis_queue.contrib.tasks.prune",  # PruneTaskResults, named by a schedule (test_tasks_results.py)
    ],
}

# django.tasks (Django 6): @task functions in tests/task_defs.py run through the sqlite connection.
TASKS = {
    "default": {
        "BACKEND": "kinetis_queue.tasks.KinetisTaskBackend",
        "QUEUES": [],
        # A worker subprocess started by a test of another store gets that store's connection here.
        "OPTIONS": {"CONNECTION": os.environ.get("KINETIS_TESTS_TASKS_CONNECTION", "sqlite")},
    }
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"kinetis_queue": {"handlers": ["stderr"], "level": "INFO"}},
}
