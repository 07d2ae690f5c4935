"""Django settings for the scale benchmark (``python -m bench.scale``): one connection per store.

Built on bench.settings (its SQLite file and PostgreSQL database, here ``kinetis_scale`` unless
KINETIS_BENCH_DB says otherwise), with Redis on database 13 (the tests use 0, the peers' bench 14),
the local RabbitMQ, and SQS on the moto server the benchmark starts (KINETIS_SCALE_SQS_ENDPOINT).
History and metrics are off, as they are by default in most deployments' hot path: the benchmark
measures the queue. The worker registry (a row per worker process in the default database) stays on:
the benchmark reads it to know when every worker is up.
"""

from __future__ import annotations

import os

os.environ.setdefault("KINETIS_BENCH_DB", "kinetis_scale")

from bench.settings import *  # noqa: F403
from bench.settings import DATABASES

#: No MariaDB here: the scale benchmark's SQL store is PostgreSQL.
del DATABASES["mariadb"]
#: Seconds SQLite waits for a lock: 16 worker processes write their registry rows to the default database.
DATABASES["default"]["OPTIONS"] = {"timeout": 20}

REDIS_URL = os.environ.get("KINETIS_SCALE_REDIS_URL", "redis://127.0.0.1:6379/13")
#: The smoke test (tests/bench/test_scale_harness.py) gives its run a prefix of its own, to delete afterwards.
REDIS_PREFIX = os.environ.get("KINETIS_SCALE_REDIS_PREFIX", "kinetis_scale:")
RABBITMQ_URL = os.environ.get("KINETIS_SCALE_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//")
#: Nothing listens at the fallback, so a stray SQS call fails instead of reaching AWS.
SQS_ENDPOINT = os.environ.get("KINETIS_SCALE_SQS_ENDPOINT", "http://127.0.0.1:9")

KINETIS_QUEUE = {
    "DEFAULT_CONNECTION": "postgres",
    "CONNECTIONS": {
        "postgres": {"BACKEND": "sql", "DATABASE": "postgres"},
        "redis": {"BACKEND": "redis", "URL": REDIS_URL, "PREFIX": REDIS_PREFIX},
        "rabbitmq": {"BACKEND": "rabbitmq", "URL": RABBITMQ_URL},
        "sqs": {"BACKEND": "sqs", "REGION": "us-east-1", "ENDPOINT_URL": SQS_ENDPOINT},
    },
    "HISTORY": False,
    "METRICS": False,
}
