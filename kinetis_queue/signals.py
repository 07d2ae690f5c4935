"""The outcome signals, sent by the worker and nowhere else, after the backend accepted the transition
(and ``push_on_commit_failed``, sent by ``push_on_commit()``).

Receivers run through ``send_robust``: one that raises is logged and never changes the outcome.
Every signal is sent with ``sender=type(queue)``.
"""

from __future__ import annotations

from django.dispatch import Signal

#: handle() returned and ack() was accepted. provides: job (QueuedJob), connection
job_succeeded = Signal()
#: handle() raised with attempts left and release() was accepted.
#: provides: job, connection, exception, delay (seconds)
job_released = Signal()
#: handle() raised at the cap and fail() was accepted.
#: provides: job, connection, exception, failed_job_id (None without a recorder), args (redacted)
job_failed_permanently = Signal()
#: The job was not started by its expiry (kinetis_queue.expiry) and ack() was accepted: it never ran.
#: provides: job, connection
job_expired = Signal()
#: The backend refused the settlement as stale; nothing was written.
#: provides: job, connection, operation (JobSettlement), error (StaleJobHandleError), exception (job's own, or None)
job_settlement_lost = Signal()

#: Sent by ``push_on_commit()`` (not the worker) when its push failed inside the commit hook: the
#: transaction committed but the job was not stored. ``sender`` is the queue's class.
#: provides: job_id, job_class (stored dotted path), queue, connection, exception
push_on_commit_failed = Signal()
