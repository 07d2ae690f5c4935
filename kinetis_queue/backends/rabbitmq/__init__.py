"""The RabbitMQ backend (``"BACKEND": "rabbitmq"``): see queue.py, and ladder.py for delays."""

from __future__ import annotations

from kinetis_queue.backends.rabbitmq.queue import RabbitMqDelivery, RabbitMqQueue

__all__ = ["RabbitMqDelivery", "RabbitMqQueue"]
