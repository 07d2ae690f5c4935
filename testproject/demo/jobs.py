"""Sample jobs for ``manage.py demo``."""

from __future__ import annotations

from typing import Annotated

from kinetis_queue import Job, JobContext, Sensitive


class SendWelcomeEmail(Job):
    """Succeeds at once. The token is Sensitive: it never appears in logs or error messages."""

    def __init__(self, email: str, token: Annotated[str, Sensitive]) -> None:
        self.email = email
        self.token = token

    def handle(self, context: JobContext) -> None:
        context.logger.info("pretending to send a welcome email to %s", self.email)


class SendReminder(Job):
    """Pushed with a delay: not run before the delay has passed."""

    def __init__(self, email: str) -> None:
        self.email = email

    def handle(self) -> None:
        pass


class CallFlakyApi(Job):
    """Fails on its first attempt (a timeout, say) and succeeds when retried."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint

    def handle(self, context: JobContext) -> None:
        if context.attempts == 1:
            raise ConnectionError(f"{self.endpoint} timed out")


class ImportBrokenFile(Job):
    """Fails every time: after its last attempt it is recorded in the failed-jobs table."""

    def __init__(self, filename: str) -> None:
        self.filename = filename

    def handle(self) -> None:
        raise ValueError("row 3 has no 'email' column")
