"""The SQS side of the test suite: moto's server as a subprocess, and the queues each test uses.

moto's server is a real HTTP endpoint speaking the SQS protocol; the backend talks to it like to any
SQS-compatible server. Only what the backend must never do itself happens here: creating queues,
and reaching into a stored message the way another writer would.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from botocore.config import Config

from kinetis_queue.backends.sqs.queue import new_session
from tests.support.coverage_env import uncovered

#: The variable a worker subprocess reads the endpoint from (tests/settings.py).
ENDPOINT_VARIABLE = "KINETIS_TESTS_SQS_ENDPOINT"
REGION = "us-east-1"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def admin_client(endpoint: str) -> Any:
    """A client for what the tests do besides the backend: create queues, inspect and write messages."""
    return new_session().client(
        "sqs", endpoint_url=endpoint, region_name=REGION, config=Config(retries={"total_max_attempts": 1})
    )


class MotoServer:
    """``python -m moto.server`` on a free loopback port, with the environment boto3 needs to reach it."""

    def __init__(self, process: subprocess.Popen[bytes], endpoint: str, log: Path) -> None:
        self.process = process
        self.endpoint = endpoint
        self.log = log
        self.admin = admin_client(endpoint)

    @classmethod
    @contextmanager
    def running(cls) -> Iterator[MotoServer]:
        """Start the server (retrying on another port if one was taken meanwhile), stop it at the end."""
        log = Path(tempfile.gettempdir()) / f"kinetis_queue_moto_{os.getpid()}.log"
        server = None
        for _ in range(3):
            server = cls._start(log)
            if server is not None:
                break
        if server is None:
            raise RuntimeError(f"moto's server did not start; its output is in {log}")
        try:
            yield server
        finally:
            server.process.terminate()
            try:
                server.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.process.kill()
                server.process.wait()
            log.unlink(missing_ok=True)

    @classmethod
    def _start(cls, log: Path) -> MotoServer | None:
        port = _free_port()
        endpoint = f"http://127.0.0.1:{port}"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                env=uncovered(),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        server = cls(process, endpoint, log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if process.poll() is not None:
                return None  # exited: most likely the port was taken between choosing and binding it
            try:
                server.admin.list_queues()
                return server
            except Exception:  # not answering yet
                time.sleep(0.05)
        process.kill()
        process.wait()
        return None


def environment(scratch: Path) -> dict[str, str]:
    """Dummy credentials and no AWS config files, so no developer's AWS setup is read or used."""
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_CONFIG_FILE": str(scratch / "missing-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(scratch / "missing-aws-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }


#: Variables that would point boto3 at a developer's own AWS profile or session.
CLEARED_VARIABLES = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_REGION")


class SqsTestQueues:
    """The SQS queues one test uses: each is created the first time the backend looks its name up.

    Conformance tests name their queues after the ``queue_name`` fixture (``queue_name``,
    ``queue_name + "-low"``, ...), so every GetQueueUrl for a name starting with it first creates
    that queue on the server, through the admin client. The backend itself never creates a queue.
    """

    def __init__(self, server: MotoServer, prefix: str) -> None:
        self.admin = server.admin
        self.prefix = prefix
        self.urls: dict[str, str] = {}

    def create(self, name: str) -> str:
        url = self.urls.get(name)
        if url is None:
            # A FIFO connection's names end in .fifo (SqsQueue.sqs_name): SQS requires the attribute too.
            attributes = {"FifoQueue": "true"} if name.endswith(".fifo") else {}
            url = self.urls[name] = str(self.admin.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"])
        return url

    def delete_all(self) -> None:
        """Delete every queue this test created: moto's server lives for the session, and a listing of its
        queues (queue_status, the dashboard, the metrics' depths) reads each one, so kept queues slow every
        later test that lists them."""
        for url in self.urls.values():
            try:
                self.admin.delete_queue(QueueUrl=url)
            except self.admin.exceptions.QueueDoesNotExist:  # the test deleted it itself
                pass
        self.urls.clear()

    def prepare(self, queue: Any) -> None:
        """Hook the backend's client: a lookup of one of this test's names creates the queue first."""

        def create_first(params: dict[str, Any], **kwargs: Any) -> None:
            name = params.get("QueueName", "")
            if name.startswith(self.prefix):
                self.create(name)

        queue.client.meta.events.register("before-parameter-build.sqs.GetQueueUrl", create_first)

    def _find(self, job_id: str, wait: float) -> tuple[str, dict[str, Any]]:
        """Receive the message carrying ``job_id`` from one of this test's queues, as another consumer would."""
        import json

        deadline = time.monotonic() + wait
        while True:
            for url in self.urls.values():
                response = self.admin.receive_message(
                    QueueUrl=url,
                    MaxNumberOfMessages=10,
                    WaitTimeSeconds=0,
                    VisibilityTimeout=30,
                    MessageSystemAttributeNames=["All"],
                    MessageAttributeNames=["All"],
                )
                found = None
                for message in response.get("Messages", []):
                    if found is None and json.loads(message["Body"]).get("id") == job_id:
                        found = message
                    else:  # not ours: make it visible again at once
                        self.admin.change_message_visibility(
                            QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
                        )
                if found is not None:
                    return url, found
            if time.monotonic() > deadline:
                raise AssertionError(f"no message for job {job_id} on {sorted(self.urls)} within {wait}s")
            time.sleep(0.1)

    def steal_reservation(self, job_id: str) -> None:
        """Take the job over as another worker would once its visibility timeout passes: receive it again.

        SQS is unfenced, so this makes the first delivery stale without making its handle fail.
        """
        self._find(job_id, wait=30)

    def rewrite_stored_job(self, job_id: str, job_class: str, args: dict[str, Any]) -> None:
        """Replace a waiting job's class and args: delete its message and send one carrying the same id.

        The replacement keeps the body's id and pushedAt and every message attribute; SQS gives it a
        fresh ApproximateReceiveCount, which is the attempt number, as the original's was.
        """
        import json

        url, message = self._find(job_id, wait=5)
        body = json.loads(message["Body"])
        body.update({"class": job_class, "args": args})
        attributes = {
            name: {key: value for key, value in attribute.items() if key in ("DataType", "StringValue")}
            for name, attribute in message.get("MessageAttributes", {}).items()
        }
        fifo: dict[str, str] = {}
        if url.endswith(".fifo"):  # a fresh deduplication id: the original's would drop the replacement
            fifo = {"MessageGroupId": uuid.uuid4().hex, "MessageDeduplicationId": uuid.uuid4().hex}
        self.admin.send_message(QueueUrl=url, MessageBody=json.dumps(body), MessageAttributes=attributes, **fifo)
        self.admin.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
