"""The outbox table: pushes written in a business transaction, waiting for the relay to send them."""

from __future__ import annotations

from django.db import models

from kinetis_queue.db.fields import ExactCharField
from kinetis_queue.validation import JOB_ID_LENGTH, MAX_QUEUE_NAME


class OutboxRecord(models.Model):
    """One push waiting to be relayed to its connection's store (kinetis_queue/outbox).

    Rows are relayed per (connection, queue) in ``id`` order and deleted once the store confirmed them.
    """

    connection = models.CharField(max_length=64)
    queue = ExactCharField(max_length=MAX_QUEUE_NAME)
    job_id = models.CharField(max_length=JOB_ID_LENGTH)
    #: The envelope as Envelope.to_json() writes it (attempts, cap and metadata included).
    envelope = models.TextField()
    #: Unix seconds of the push (the envelope's pushedAt): how long a row has waited (queue_status).
    pushed_at = models.FloatField()
    #: Unix seconds when the job becomes due (the push's time plus its delay): the relay sends what is left.
    due_at = models.FloatField()

    class Meta:
        app_label = "kinetis_queue"
        db_table = "kinetis_queue_outbox"
        verbose_name = "outbox push"
        indexes = [models.Index(fields=["connection", "queue", "id"], name="kinetis_queue_outbox_order")]

    def __str__(self) -> str:
        return f"job {self.job_id} for {self.connection}/{self.queue}"
