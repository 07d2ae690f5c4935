"""Rate limits on every storing backend (kinetis_queue.ratelimits, docs/rate-limits.md): a delivery whose key used
up its window is given back unstarted, no attempt charged, until the next start is allowed; the store counts
starts across workers, by sliding window or token bucket."""

from __future__ import annotations

import uuid

import pytest

from kinetis_queue.contracts import Queue
from kinetis_queue.exceptions import InvalidQueueArgumentError
from kinetis_queue.outcomes import JobOutcome
from kinetis_queue.ratelimits import RateLimit, rate_store_of
from kinetis_queue.ratelimits.store import rate_digest
from tests import jobs
from tests.support.helpers import process_deliveries, wait_until

pytestmark = pytest.mark.trait("stores_jobs")


@pytest.fixture(autouse=True)
def _calls() -> None:
    jobs.CALLS.clear()


def _digest(connection: Queue, algorithm: str = "window") -> str:
    return rate_digest(connection.connection, algorithm, f"test-{uuid.uuid4().hex}")


def test_a_window_counts_at_most_its_limit_then_says_how_long_to_wait(connection: Queue) -> None:
    """Windows of seconds, not milliseconds: the assertions hold on a loaded machine, where one take may come a
    good part of a second after the one before."""
    store = rate_store_of(connection)
    digest, limit = _digest(connection), RateLimit(2, 3.0)
    assert [store.take(digest, limit, uuid.uuid4().hex) for _ in range(2)] == [0.0, 0.0]
    wait = store.take(digest, limit, uuid.uuid4().hex)
    assert 0 < wait <= 3.0
    # Once the first two starts are 3 s old, two more are allowed, then the window is full again.
    wait_until(lambda: store.take(digest, limit, uuid.uuid4().hex) == 0.0, 15)
    wait_until(lambda: store.take(digest, limit, uuid.uuid4().hex) == 0.0, 15)
    assert store.take(digest, limit, uuid.uuid4().hex) > 0


def test_a_token_bucket_allows_its_burst_then_one_start_per_interval(connection: Queue) -> None:
    store = rate_store_of(connection)
    digest, limit = _digest(connection, "bucket"), RateLimit(2, 6.0, "bucket", burst=3)
    assert [store.take(digest, limit, "") for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = store.take(digest, limit, "")
    assert 0 < wait <= 3.0  # one token every per / limit = 3 s
    wait_until(lambda: store.take(digest, limit, "") == 0.0, 15)  # one token refilled: one start, no second
    assert store.take(digest, limit, "") > 0


def test_a_delivery_over_its_class_limit_is_deferred_unstarted_until_its_window_allows(
    connection: Queue, queue_name: str
) -> None:
    """RateLimitedCustomer allows one start per 30 s per customer: customer 1's second job is deferred (no
    attempt charged, back once the window allows, never before), customer 2's runs."""
    customer = uuid.uuid4().int % 10**9  # a key of its own: the window outlives the test
    first = connection.push(jobs.RateLimitedCustomer(customer), queue=queue_name)
    second = connection.push(jobs.RateLimitedCustomer(customer), queue=queue_name)
    other = connection.push(jobs.RateLimitedCustomer(customer + 1), queue=queue_name)

    reports = process_deliveries(connection, queue_name, 3)

    assert [(r.job_id, r.outcome, r.attempt) for r in reports] == [
        (first, JobOutcome.SUCCEEDED, 1),
        (second, JobOutcome.DEFERRED, 1),
        (other, JobOutcome.SUCCEEDED, 1),
    ]
    assert 25 < reports[1].delay <= 30  # until the first start is 30 s old
    assert jobs.CALLS == [("RateLimitedCustomer", customer, 1), ("RateLimitedCustomer", customer + 1, 1)]
    assert connection.size(queue_name) == 1  # the deferred one waits, unstarted


def test_a_push_may_bring_its_own_limit_and_key(connection: Queue, queue_name: str) -> None:
    key = f"api-{uuid.uuid4().hex}"
    first = connection.push(jobs.Noop(), queue=queue_name, rate_limit=(1, 60), rate_key=key)
    second = connection.push(jobs.Noop(), queue=queue_name, rate_limit=(1, 60), rate_key=key)
    free = connection.push(jobs.Noop(), queue=queue_name)

    reports = process_deliveries(connection, queue_name, 3)

    assert [(r.job_id, r.outcome) for r in reports] == [
        (first, JobOutcome.SUCCEEDED),
        (second, JobOutcome.DEFERRED),
        (free, JobOutcome.SUCCEEDED),
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"rate_limit": 10}, "rate_limit must be (limit, per)"),
        ({"rate_limit": (0, 60)}, "rate_limit: the limit must be an int from 1"),
        ({"rate_limit": (10, 0)}, "rate_limit: per must be a number of seconds above 0"),
        ({"rate_limit": (10, 60, "leaky")}, "rate_limit: the algorithm must be one of 'window', 'bucket'"),
        ({"rate_limit": RateLimit(10, 60, burst=5)}, "burst is a token bucket's"),
        ({"rate_limit": (10, 60), "rate_key": ""}, "rate_key must be a non-empty str"),
        ({"rate_key": "customer:1"}, "rate_key needs a rate limit"),
    ],
)
def test_a_bad_rate_option_is_refused_at_push_naming_it(
    connection: Queue, queue_name: str, options: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidQueueArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
        connection.push(jobs.Noop(), queue=queue_name, **options)  # type: ignore[arg-type]
    assert connection.size(queue_name) == 0


@pytest.mark.logs_errors("kinetis_queue.worker")
def test_a_raising_rate_key_is_the_jobs_own_failure_naming_no_value(
    connection: Queue, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = connection.push(jobs.RateKeyRaises(), queue=queue_name, max_attempts=1)
    reports = process_deliveries(connection, queue_name, 1)
    assert [(r.job_id, r.outcome) for r in reports] == [(job_id, JobOutcome.FAILED)]
    assert "secret-rate-key-value" not in caplog.text


def test_a_bad_class_declaration_is_refused_at_push_naming_the_class(connection: Queue, queue_name: str) -> None:
    with pytest.raises(InvalidQueueArgumentError, match=r"tests\.jobs\.BadRateDeclaration\.rate_limit: the limit"):
        connection.push(jobs.BadRateDeclaration(), queue=queue_name)
    assert connection.size(queue_name) == 0
