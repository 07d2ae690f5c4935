"""Direct access to each backend's store, for what the contract cannot see from the Queue interface.

Scenarios stay generic: they ask ``store_for(backend, queue)`` for an adapter and use its
operations. An adapter is backend-specific by nature, so this is the one place of the fault tier
that knows how a backend lays out its data. A backend without an adapter skips the scenarios
that need one, and says so.

Operations:

- ``remaining(queue)``: everything the store holds for ``queue``, reservations included (the
  drain's "must be zero" check, RELIABILITY.md §2.1);
- ``snapshot(queue)``: the stored state, byte for byte, to compare before and after a stale settlement;
- ``expire(job)``: push the delivery's reservation into the past (Oban-style state injection);
- ``inject_raw(queue, name)``: write malformed item ``name`` of ``MALFORMED`` straight into the store;
- ``inject_job(queue, job_class, args, max_attempts)``: write a well-formed job whose class or
  arguments the code cannot rebuild (a reconstruction failure, not malformed data);
- ``inject_fields(queue, fields)``: write one job whose stored fields (the envelope's keys: id, pushedAt,
  class, args, attempts, maxAttempts, metadata) are ``STORED_FIELDS`` overridden by ``fields``, each in
  the backend's own layout; False when the store itself cannot hold such a value (nothing written);
- ``make_due(queue)`` / ``due_at(queue)``: bring delayed jobs due / read when the first one is;
- ``server()``: where a fault proxy should forward; ``service_fault()``: one fault of the service
  that only touches this run's sessions (None when the backend has none that is safe on a shared server).
"""

from __future__ import annotations

import json
import pickle
import re
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from django.db import connections as db_connections

from kinetis_queue import conf
from kinetis_queue.contracts import Queue, QueuedJob
from tests.support.backends import Backend

TABLE = "kinetis_queue_jobs"


class PickleCanary:
    """Unpickling this runs ``open(path, 'w')``: proof that nothing unpickles stored job data."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (exec, (f"open({self.path!r}, 'w').close()",))


def pickle_payload(canary: str, protocol: int = 0) -> bytes:
    """A pickle whose loading would create ``canary`` (protocol 0 is ASCII, so it fits a text column)."""
    return pickle.dumps(PickleCanary(canary), protocol=protocol)


def _deep(depth: int) -> str:
    return '{"x":' + "[" * depth + "]" * depth + "}"


def _args_variants(canary: str) -> dict[str, str | bytes]:
    """Malformed texts for an ``args`` (or whole-envelope) field, by name."""
    return {
        "not-json": "not json",
        "array-not-object": "[]",
        "string-not-object": '"x"',
        "null": "null",
        "nan-literal": '{"x": NaN}',
        "infinity-literal": '{"x": Infinity}',
        "float-overflow-1e400": '{"x": 1e400}',
        "nested-100000-deep": _deep(100_000),
        "nested-40-deep": _deep(40),
        "lone-surrogate": '{"x": "\\ud800"}',
        "duplicate-keys": '{"x": 1, "x": 2}',
        "pickle-protocol-0": pickle_payload(canary).decode("ascii"),
    }


class Store(Protocol):
    fenced: bool
    sweep_reclaims_expired: bool

    def remaining(self, queue: str) -> int: ...
    def snapshot(self, queue: str) -> Any: ...
    def expire(self, job: QueuedJob) -> None: ...
    def make_due(self, queue: str) -> None: ...
    def due_at(self, queue: str) -> float: ...
    def server(self) -> tuple[str, int] | None: ...
    def service_fault(self) -> str | None: ...
    def malformed(self, canary: str) -> list[str]: ...
    def inject_raw(self, queue: str, name: str, canary: str) -> None: ...
    def inject_job(self, queue: str, job_class: str, args: dict[str, Any], max_attempts: int | None) -> str: ...
    def inject_fields(self, queue: str, fields: dict[str, Any]) -> bool: ...


def stored_fields(**changes: Any) -> dict[str, Any]:
    """A valid job of tests.hostile_jobs.Echo as the envelope's keys, with ``changes`` applied."""
    fields: dict[str, Any] = {
        "id": uuid.uuid4().hex,
        "pushedAt": time.time(),
        "class": "tests.hostile_jobs.Echo",
        "args": {},
        "attempts": 0,
        "maxAttempts": 1,
        "metadata": {},
    }
    fields.update(changes)
    return fields


class SqlStore:
    """The ``kinetis_queue_jobs`` table, through the backend's Django database alias."""

    fenced = True
    #: A pop() reclaims only the expired reservation it claims (contract: "Backend mechanisms: SQL").
    sweep_reclaims_expired = False

    def __init__(self, database: str) -> None:
        self.database = database
        self.vendor = db_connections[database].vendor

    def _execute(self, sql: str, params: list[Any]) -> Any:
        with db_connections[self.database].cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description else cursor.rowcount

    def remaining(self, queue: str) -> int:
        return int(self._execute(f"SELECT COUNT(*) FROM {TABLE} WHERE queue = %s", [queue])[0][0])

    def snapshot(self, queue: str) -> Any:
        rows = self._execute(
            f"SELECT id, job_id, queue, job_class, args, metadata, attempts, max_attempts, pushed_at, "
            f"available_at, reserved_at, reserved_token FROM {TABLE} WHERE queue = %s ORDER BY id",
            [queue],
        )
        failed = self._execute("SELECT COUNT(*) FROM kinetis_queue_failed_jobs WHERE queue = %s", [queue])
        return repr((rows, failed)).encode()

    def expire(self, job: QueuedJob) -> None:
        changed = self._execute(
            f"UPDATE {TABLE} SET reserved_at = reserved_at - 86400 WHERE id = %s", [job.handle.row_id]
        )
        assert changed == 1

    def set_reservation(self, job_id: str, reserved_at: float | None, token: str | None) -> None:
        changed = self._execute(
            f"UPDATE {TABLE} SET reserved_at = %s, reserved_token = %s WHERE job_id = %s", [reserved_at, token, job_id]
        )
        assert changed == 1

    def set_available_at(self, job_id: str, available_at: float) -> None:
        self._execute(f"UPDATE {TABLE} SET available_at = %s WHERE job_id = %s", [available_at, job_id])

    def due_at(self, queue: str) -> float:
        """When the queue's first job becomes poppable, on the clock that scored it (``available_at``)."""
        return float(self.column_where(queue, "available_at"))

    def server(self) -> tuple[str, int] | None:
        """Where the database listens (None for SQLite): what a fault proxy forwards to."""
        settings_dict = db_connections[self.database].settings_dict
        if self.vendor == "sqlite":
            return None
        return settings_dict["HOST"] or "127.0.0.1", int(settings_dict["PORT"])

    def service_fault(self) -> str | None:
        """PostgreSQL: pg_terminate_backend() of this run's worker sessions (PGAPPNAME, set by procs.env)."""
        if self.vendor != "postgresql":
            return None
        rows = self._execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'kq-fault-worker'",
            [],
        )
        return f"pg_terminate_backend x{len(rows)}"

    def make_due(self, queue: str) -> None:
        self._execute(f"UPDATE {TABLE} SET available_at = %s WHERE queue = %s", [time.time(), queue])

    def column_where(self, queue: str, name: str) -> Any:
        """``name`` of the queue's first row (None when there is none)."""
        rows = self._execute(f"SELECT {name} FROM {TABLE} WHERE queue = %s ORDER BY id", [queue])
        return rows[0][0] if rows else None

    def column(self, job_id: str, name: str) -> Any:
        rows = self._execute(f"SELECT {name} FROM {TABLE} WHERE job_id = %s", [job_id])
        return rows[0][0] if rows else None

    def _insert(self, queue: str, **columns: Any) -> str:
        now = time.time()
        row: dict[str, Any] = {
            "job_id": uuid.uuid4().hex,
            "queue": queue,
            "job_class": "tests.faults.jobs.Tagged",
            "args": "{}",
            "metadata": "{}",
            "attempts": 0,
            "max_attempts": 1,
            "pushed_at": now,
            "available_at": now,
            "reserved_at": None,
            "reserved_token": None,
        }
        row.update(columns)
        names = ", ".join(row)
        marks = ", ".join(["%s"] * len(row))
        self._execute(f"INSERT INTO {TABLE} ({names}) VALUES ({marks})", list(row.values()))
        return str(row["job_id"])

    def malformed(self, canary: str) -> list[str]:
        names = [f"args-{name}" for name in _args_variants(canary)]
        names += [
            "metadata-array",
            "metadata-duplicate-keys",
            "job-id-empty",
            "job-id-uppercase",
            "class-empty",
            "attempts-negative",
            "max-attempts-negative",
            "pushed-at-negative",
            "pushed-at-1e300",
        ]
        if self.vendor == "sqlite":  # only SQLite's TEXT keeps bytes that are not UTF-8 (as a BLOB)
            names += ["args-invalid-utf8", "args-pickle-protocol-4"]
        return names

    def inject_raw(self, queue: str, name: str, canary: str) -> None:
        variants = _args_variants(canary)
        special: dict[str, dict[str, Any]] = {
            "metadata-array": {"metadata": "[]"},
            "metadata-duplicate-keys": {"metadata": '{"k": 1, "k": 2}'},
            "job-id-empty": {"job_id": ""},
            "job-id-uppercase": {"job_id": "A" * 32},
            "class-empty": {"job_class": ""},
            "attempts-negative": {"attempts": -1},
            "max-attempts-negative": {"max_attempts": -1},
            "pushed-at-negative": {"pushed_at": -1.0},
            "pushed-at-1e300": {"pushed_at": 1e300},
            "args-invalid-utf8": {"args": b'{"x": "\xff\xfe"}'},
            "args-pickle-protocol-4": {"args": pickle_payload(canary, protocol=4)},
        }
        if name in special:
            self._insert(queue, **special[name])
        else:
            self._insert(queue, args=variants[name.removeprefix("args-")])

    def inject_job(self, queue: str, job_class: str, args: dict[str, Any], max_attempts: int | None) -> str:
        return self._insert(queue, job_class=job_class, args=json.dumps(args), max_attempts=max_attempts)

    def inject_fields(self, queue: str, fields: dict[str, Any]) -> bool:
        fields = stored_fields(**fields)
        try:
            self._insert(
                queue,
                job_id=fields["id"],
                pushed_at=fields["pushedAt"],
                job_class=fields["class"],
                args=json.dumps(fields["args"]),
                attempts=fields["attempts"],
                max_attempts=fields["maxAttempts"],
                metadata=json.dumps(fields["metadata"]),
            )
        except Exception:  # the column or the driver refuses the value: no row can hold it
            return False
        return True


class RedisStore:
    """The three keys of a queue (``RedisQueue.keys()``), through a plain redis-py client."""

    fenced = True
    #: Each pop() sweep reclaims every expired lease (up to 100) before it reserves ("Backend mechanisms: Redis").
    sweep_reclaims_expired = True

    def __init__(self, backend: Backend, queue: Queue, url: str | None = None) -> None:
        import redis

        self.queue = queue
        self.client = redis.Redis.from_url(url or conf.connection_settings(backend.connection).options["URL"])

    def close(self) -> None:
        """Close the client's connections (the fixtures do, so no socket is left to the garbage collector)."""
        self.client.close()

    def server(self) -> tuple[str, int] | None:
        pool = self.client.connection_pool.connection_kwargs
        return pool.get("host", "127.0.0.1"), int(pool.get("port", 6379))

    def service_fault(self) -> str | None:
        return None  # the shared server's clients are not all this run's: see RELIABILITY.md §2.3

    def _keys(self, queue: str) -> Any:
        return self.queue.keys(queue)  # type: ignore[attr-defined]

    def remaining(self, queue: str) -> int:
        keys = self._keys(queue)
        return int(self.client.llen(keys.pending) + self.client.zcard(keys.delayed) + self.client.zcard(keys.leased))

    def snapshot(self, queue: str) -> Any:
        return repr([self.client.dump(key) for key in self._keys(queue)]).encode()

    def expire(self, job: QueuedJob) -> None:
        changed = self.client.zadd(self._keys(job.queue).leased, {job.handle.member: 0}, xx=True, ch=True)
        assert changed == 1

    def due_at(self, queue: str) -> float:
        """The first delayed job's due score (the pushing process's clock, contract: "Delayed jobs")."""
        members = self.client.zrange(self._keys(queue).delayed, 0, 0, withscores=True)
        assert members, "no delayed job"
        return float(members[0][1])

    def make_due(self, queue: str) -> None:
        delayed = self._keys(queue).delayed
        for member in self.client.zrange(delayed, 0, -1):
            self.client.zadd(delayed, {member: 0}, xx=True)

    def malformed(self, canary: str) -> list[str]:
        names = [f"envelope-{name}" for name in _args_variants(canary)]
        names += [
            f"missing-{key}" for key in ("id", "pushedAt", "class", "args", "attempts", "maxAttempts", "metadata")
        ]
        names += [
            "attempts-negative",
            "attempts-string",
            "attempts-1e30",
            "args-nan",
            "args-deep",
            "args-lone-surrogate",
            "invalid-utf8",
            "pickle-protocol-4",
        ]
        return names

    def _envelope(self, **changes: Any) -> dict[str, Any]:
        envelope = {
            "id": uuid.uuid4().hex,
            "pushedAt": time.time(),
            "class": "tests.faults.jobs.Tagged",
            "args": {},
            "attempts": 0,
            "maxAttempts": 1,
            "metadata": {},
        }
        envelope.update(changes)
        return envelope

    def inject_raw(self, queue: str, name: str, canary: str) -> None:
        variants = _args_variants(canary)
        payload: str | bytes
        if name.startswith("envelope-"):
            payload = variants[name.removeprefix("envelope-")]
        elif name.startswith("missing-"):
            envelope = self._envelope()
            del envelope[name.removeprefix("missing-")]
            payload = json.dumps(envelope)
        else:
            texts: dict[str, Callable[[], str | bytes]] = {
                "attempts-negative": lambda: json.dumps(self._envelope(attempts=-1)),
                "attempts-string": lambda: json.dumps(self._envelope(attempts="x")),
                "attempts-1e30": lambda: json.dumps(self._envelope(attempts=10**30)),
                "args-nan": lambda: json.dumps(self._envelope()).replace('"args": {}', '"args": {"x": NaN}'),
                "args-deep": lambda: json.dumps(self._envelope()).replace('"args": {}', f'"args": {_deep(100_000)}'),
                "args-lone-surrogate": lambda: json.dumps(self._envelope(args={"x": "\ud800"})),
                "invalid-utf8": lambda: (
                    json.dumps(self._envelope()).encode().replace(b'"args": {}', b'"args": {"x": "\xff"}')
                ),
                "pickle-protocol-4": lambda: pickle_payload(canary, protocol=4),
            }
            payload = texts[name]()
        self.client.lpush(self._keys(queue).pending, payload)

    def inject_job(self, queue: str, job_class: str, args: dict[str, Any], max_attempts: int | None) -> str:
        envelope = self._envelope(**{"class": job_class, "args": args, "maxAttempts": max_attempts})
        self.client.lpush(self._keys(queue).pending, json.dumps(envelope, separators=(",", ":")))
        return str(envelope["id"])

    def inject_fields(self, queue: str, fields: dict[str, Any]) -> bool:
        try:
            member = json.dumps(stored_fields(**fields))
        except (TypeError, ValueError):  # not a JSON value: no envelope holds it
            return False
        self.client.lpush(self._keys(queue).pending, member)
        return True


def _valid_body(job_class: str = "tests.faults.jobs.Tagged", args: dict[str, Any] | None = None) -> str:
    return json.dumps({"id": uuid.uuid4().hex, "pushedAt": time.time(), "class": job_class, "args": args or {}})


#: Characters SQS refuses in a message or an attribute (it allows #x9, #xA, #xD, #x20 to #xD7FF,
#: #xE000 to #xFFFD and #x10000 up).
_SQS_REFUSED = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _sqs_number(text: str) -> bool:
    """Whether SQS accepts ``text`` as a Number attribute: a finite decimal number."""
    from decimal import Decimal, InvalidOperation

    try:
        return Decimal(text).is_finite()
    except InvalidOperation:
        return False


class SqsStore:
    """An SQS queue (moto's server in tests), through the queue's own boto3 client. Unfenced: no snapshot."""

    fenced = False
    sweep_reclaims_expired = False
    COUNTS = (
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    )

    def __init__(self, queue: Queue) -> None:
        self.queue: Any = queue

    def _url(self, queue: str) -> str:
        return str(self.queue.client.get_queue_url(QueueName=self.queue.sqs_name(queue))["QueueUrl"])

    def _send(self, **message: Any) -> None:
        """SendMessage as another writer would; on a FIFO queue with a group and deduplication id of its own."""
        if self.queue.fifo:
            message = {**message, "MessageGroupId": uuid.uuid4().hex, "MessageDeduplicationId": uuid.uuid4().hex}
        self.queue.client.send_message(**message)

    def remaining(self, queue: str) -> int:
        attributes = self.queue.client.get_queue_attributes(QueueUrl=self._url(queue), AttributeNames=list(self.COUNTS))
        return sum(int(attributes["Attributes"][name]) for name in self.COUNTS)

    def server(self) -> tuple[str, int] | None:
        return None

    def service_fault(self) -> str | None:
        return None

    def malformed(self, canary: str) -> list[str]:
        return [f"body-{name}" for name in _args_variants(canary)] + [
            "body-missing-id",
            "body-extra-key",
            "max-attempts-attribute-string",
            "max-attempts-attribute-negative",
            "metadata-attribute-not-json",
            "body-garbage-1mib",
        ]

    def inject_raw(self, queue: str, name: str, canary: str) -> None:
        body: str = _valid_body()
        attributes: dict[str, Any] = {}
        if name.startswith("body-") and name.removeprefix("body-") in _args_variants(canary):
            body = str(_args_variants(canary)[name.removeprefix("body-")])
        elif name == "body-missing-id":
            data = json.loads(body)
            del data["id"]
            body = json.dumps(data)
        elif name == "body-extra-key":
            body = json.dumps({**json.loads(body), "attempts": 0})
        elif name == "max-attempts-attribute-string":
            attributes["maxAttempts"] = {"DataType": "String", "StringValue": "abc"}
        elif name == "max-attempts-attribute-negative":
            attributes["maxAttempts"] = {"DataType": "Number", "StringValue": "-1"}
        elif name == "metadata-attribute-not-json":
            attributes["metadata"] = {"DataType": "String", "StringValue": "not json"}
        elif name == "body-garbage-1mib":
            body = "x" * 1_048_576
        message: dict[str, Any] = {"QueueUrl": self._url(queue), "MessageBody": body}
        if attributes:
            message["MessageAttributes"] = attributes
        self._send(**message)

    def inject_job(self, queue: str, job_class: str, args: dict[str, Any], max_attempts: int | None) -> str:
        body = _valid_body(job_class, args)
        attributes = (
            {}
            if max_attempts is None
            else {"MessageAttributes": {"maxAttempts": {"DataType": "Number", "StringValue": str(max_attempts)}}}
        )
        self._send(QueueUrl=self._url(queue), MessageBody=body, **attributes)
        return str(json.loads(body)["id"])

    def inject_fields(self, queue: str, fields: dict[str, Any]) -> bool:
        """The body carries id, pushedAt, class and args; maxAttempts and metadata are message attributes
        (as text: SQS keeps a Number attribute's text as sent). SQS counts attempts itself."""
        if "attempts" in fields:
            return False
        fields = stored_fields(**fields)
        try:
            body = json.dumps({key: fields[key] for key in ("id", "pushedAt", "class", "args")})
            metadata = fields["metadata"]
            text = metadata if isinstance(metadata, str) else json.dumps(metadata)
        except (TypeError, ValueError):  # not a JSON value: no message holds it
            return False
        attributes: dict[str, Any] = {}
        if fields["maxAttempts"] is not None:
            number = str(fields["maxAttempts"])
            if not _sqs_number(number):
                return False  # SQS refuses it at send (moto accepts it, then fails every receive)
            attributes["maxAttempts"] = {"DataType": "Number", "StringValue": number}
        if _SQS_REFUSED.search(text):
            return False  # SQS refuses it at send (moto accepts some, then fails every receive)
        attributes["metadata"] = {"DataType": "String", "StringValue": text}
        try:
            self._send(QueueUrl=self._url(queue), MessageBody=body, MessageAttributes=attributes)
        except Exception:  # SQS refuses the text (a NUL, a lone surrogate) or the number: no message holds it
            return False
        return True


class RabbitMqStore:
    """A RabbitMQ queue: raw publishes through py-amqp on the default exchange. Unfenced: no snapshot.

    ``remaining()`` is ``size()``: with every worker gone, a delivery they held is back in the queue.
    """

    fenced = False
    sweep_reclaims_expired = False

    def __init__(self, backend: Backend, queue: Queue) -> None:
        self.queue = queue
        self.url = conf.connection_settings(backend.connection).options["URL"]

    def remaining(self, queue: str) -> int:
        return self.queue.size(queue)

    def server(self) -> tuple[str, int] | None:
        return None

    def service_fault(self) -> str | None:
        return None

    def malformed(self, canary: str) -> list[str]:
        return [f"body-{name}" for name in _args_variants(canary)] + [
            "body-invalid-utf8",
            "headers-missing",
            "attempts-header-string",
            "metadata-header-not-json",
            "content-type-python-serialize",
            "content-encoding-gzip",
        ]

    def _publish(self, queue: str, body: bytes, **properties: Any) -> None:
        from urllib.parse import unquote, urlsplit

        import amqp

        url = urlsplit(self.url)
        vhost = unquote(url.path[1:]) if len(url.path) > 1 else "/"
        connection = amqp.Connection(
            host=f"{url.hostname}:{url.port or 5672}",
            userid=unquote(url.username or "guest"),
            password=unquote(url.password or "guest"),
            virtual_host=vhost,
        )
        connection.connect()
        try:
            message = amqp.Message(body, delivery_mode=2, **properties)
            connection.channel().basic_publish(message, exchange="", routing_key=queue)
        finally:
            connection.close()

    def inject_raw(self, queue: str, name: str, canary: str) -> None:
        headers: dict[str, Any] = {"maxAttempts": 1, "metadata": "{}"}
        body: bytes = _valid_body().encode()
        properties: dict[str, Any] = {"content_type": "application/json"}
        variant = name.removeprefix("body-")
        if name.startswith("body-") and variant in _args_variants(canary):
            value = _args_variants(canary)[variant]
            body = value if isinstance(value, bytes) else value.encode()
        elif name == "body-invalid-utf8":
            body = b'{"x": "\xff\xfe"}'
        elif name == "headers-missing":
            headers = {}
        elif name == "attempts-header-string":
            headers["attempts"] = "abc"
        elif name == "metadata-header-not-json":
            headers["metadata"] = "not json"
        elif name == "content-type-python-serialize":
            body, properties = pickle_payload(canary, protocol=4), {"content_type": "application/x-python-serialize"}
        elif name == "content-encoding-gzip":
            properties["content_encoding"] = "gzip"
            body = b"\x1f\x8b not really gzip"
        self._publish(queue, body, application_headers=headers, **properties)

    def inject_job(self, queue: str, job_class: str, args: dict[str, Any], max_attempts: int | None) -> str:
        body = _valid_body(job_class, args)
        self._publish(
            queue,
            body.encode(),
            content_type="application/json",
            application_headers={"maxAttempts": max_attempts, "metadata": "{}"},
        )
        return str(json.loads(body)["id"])

    def inject_fields(self, queue: str, fields: dict[str, Any]) -> bool:
        """The body carries id, pushedAt, class and args; attempts, maxAttempts and metadata (JSON text)
        are headers, each written with whatever AMQP type py-amqp gives the value."""
        fields = stored_fields(**fields)
        metadata = fields["metadata"]
        try:
            body = json.dumps({key: fields[key] for key in ("id", "pushedAt", "class", "args")}).encode()
        except (TypeError, ValueError):  # not a JSON value: no body holds it
            return False
        headers = {
            "attempts": fields["attempts"],
            "maxAttempts": fields["maxAttempts"],
            "metadata": metadata if isinstance(metadata, (str, datetime)) else json.dumps(metadata),
        }
        try:
            self._publish(queue, body, content_type="application/json", application_headers=headers)
        except Exception:  # py-amqp cannot encode the value as a header: no message holds it
            return False
        return True


def store_for(backend: Backend, queue: Queue) -> Store | None:
    """The adapter of ``backend``'s store, or None when the fault tier has none for it yet."""
    if backend.database is not None:
        return SqlStore(backend.database)
    kind = conf.connection_settings(backend.connection).backend
    if kind == "redis":
        return RedisStore(backend, queue)
    if kind == "sqs":
        return SqsStore(queue)  # type: ignore[return-value]
    if kind == "rabbitmq":
        return RabbitMqStore(backend, queue)  # type: ignore[return-value]
    return None
