"""Helpers for the Django databases the app writes to: the model fields its models share, whether its tables
exist, and a read-then-write transaction that is safe beside other writers on SQLite."""
