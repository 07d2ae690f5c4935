"""Seeing the queue run (issue 18): the worker registry, the per-minute history, health, metrics and traces.

Each part is Django glue around the worker's hooks (kinetis_queue.hooks): the registry
(registry.py) and the history (history.py) ride on what every delivery reports, off its path, in
batches; health.py answers ``queue_health`` and the health view.
"""
