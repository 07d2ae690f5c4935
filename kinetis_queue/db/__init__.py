"""Helpers for the Django databases the app writes to: whether its tables exist, and a read-then-write
transaction that is safe beside other writers on SQLite."""
